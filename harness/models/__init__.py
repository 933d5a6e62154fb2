"""Floor 4: the bundled tiny MoE model (config, corpus, tokenizer, training), the
tiny random family models (tiny_families: the table, tiny_family_make: made
into the cache on first use) and the shapes of real MoE models."""

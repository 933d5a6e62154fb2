"""Floor 4: the bundled tiny MoE model (config, corpus, tokenizer, training) and
the shapes of real MoE models."""

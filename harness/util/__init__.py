"""Floor 1 utilities every other room may use: the safe YAML loader, signal
handling, third-party noise capture, device names, the offline environment and
atomic run reports. Imports nothing of the project."""

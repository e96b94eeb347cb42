"""What the CLI subcommands run (each importable and testable without the CLI)."""

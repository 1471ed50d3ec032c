"""Scripts of the book pipeline (run as `python -m tools.<name>` from the repository root)."""

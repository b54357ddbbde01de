"""Tables (Markdown, CSV, LaTeX) and figures (matplotlib) built from result files."""

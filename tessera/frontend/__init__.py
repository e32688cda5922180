"""Source parsing, control-flow rewriting and source locations for errors."""

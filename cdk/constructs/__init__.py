"""One construct per concern; stacks wire them together."""

"""Small shared helpers used by every paper: mesh, distributed, checkpoint, data, results."""

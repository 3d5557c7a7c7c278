"""The HTTP routes, one module per resource (files, fine-tuning jobs, models, ...): thin
handlers over the pure translation modules of the package."""

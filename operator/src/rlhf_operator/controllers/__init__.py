"""The imperative shell: carries the pure decisions out against the API server, with memory
(what was applied, what was refused, timers), and the metrics it keeps."""

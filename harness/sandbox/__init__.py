"""The worker's sandbox: the worker process, its guarded buffers, the floating-point checks
around every port call and the C replay of a batch's repeat runs."""

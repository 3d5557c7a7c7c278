"""Test support shared by the operator's unit tests, the API emulator and the benchmarks."""

"""Performance measurement: memory bandwidth, llama-bench-style throughput, latency metrics."""

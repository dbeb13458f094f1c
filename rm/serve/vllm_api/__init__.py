"""vLLM's pooling API on `rm serve`: POST /classify and /pooling with the request and response bodies of vLLM
0.34.0 (vllm/entrypoints/pooling/{classify,pooling}/protocol.py), so a client written for a vLLM reward server
calls rm's unchanged. The texts go through /score's preparation and batching (rm/serve/bodies.py, the batcher):
the outputs are /score's, with vLLM's activation rule on top (rm/serve/vllm_api/vllm_answers.py)."""

"""The model side: the one LLM client, the model servers a run talks to (embedded llama.cpp, vLLM, a scripted
test server) and what their tokens cost."""

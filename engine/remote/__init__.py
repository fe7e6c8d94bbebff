"""Remote engines: OpenAI-compatible servers (llama-server, vLLM, `specee serve`, hosted APIs)
that answer through the same chat session as the local worker."""

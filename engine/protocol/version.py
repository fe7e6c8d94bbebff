"""The protocol's version: both sides refuse a peer of another (VersionMismatch)."""

# 2: enums checked on decode, Load carries the version and Loaded.acceleration (1: unversioned Load);
# 3: CountTokens; 4: Generate.on_overflow (an older worker would trim what the server must refuse),
# Sampling's penalties and logit_bias, ErrorKind.CONTEXT_LENGTH_EXCEEDED, Load.keep_kv, kv_disk_budget and
# measure_reference; 5: Generate.grammar, Generate.logprobs and top_logprobs, Token.logprobs (an older worker
# would ignore them); 6: Load.n_parallel and Loaded.n_parallel (an older worker would answer one request at a
# time while the server sends several), Generate.grammar_lazy, grammar_trigger_patterns/tokens, grammar_prefill
# and preserved_tokens (tool calls: an older worker would apply a lazy grammar from the first token)
# 7: PromptProgress (an older client would fail to read it), the prompt's reading interrupted by Cancel;
# Embed and Embeddings (the HTTP server's /v1/embeddings)
PROTOCOL_VERSION = 7

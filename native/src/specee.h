// SpecEE Chat's C API, compiled into libllama next to llama.cpp (see native/README.md).
// Plain C so Python (ctypes) and any frontend can bind it; llama.cpp's C++-only helpers
// (llama-ext.h) stay behind it.
#pragma once

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

// Capture the residual stream entering layer `lid` (0 = token embeddings) for every token of
// the following decodes; set before the first decode of the context (it re-reserves the graph).
LLAMA_API void specee_capture_layer_input(struct llama_context * ctx, int32_t lid, bool on);

// [n_tokens_of_last_decode x n_embd] floats, batch order, for a captured layer; NULL if not captured.
LLAMA_API const float * specee_layer_input(struct llama_context * ctx, int32_t lid);

// Message of the last failed specee_* call on this thread.
LLAMA_API const char * specee_last_error(void);

// ---- Speculative decoding: one handle for every drafter (spec/drafter.cpp, in libspecee-spec) --
// A drafter proposes up to n_draft tokens, the target verifies them with the previous sample in one
// batch, and every emitted token is sampled from the target's own logits (greedy output equals
// plain decoding; sampling keeps the target's distribution). The types:
//   "eagle"          an EAGLE-3 head (draft_model) reading the target's layer inputs (eagle.cpp)
//   "draft-simple"   a smaller model (draft_model) with the target's tokenizer, in a context of its own
//   "copy"           prompt lookup that drafts only where it pays: the draft length (0: a plain
//                    one-row decode) from the measured acceptance per match length and this
//                    machine's measured verify cost per row count (spec/copy-draft.h)
//   "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"   llama.cpp's n-gram lookups (no draft_model)
// The last two kinds are llama.cpp's own drafters (common/speculative); they live in a library of
// their own because llama.cpp's common library links libllama.

struct specee_drafter;

struct specee_drafter_stats {
    int32_t n_steps;     // verify batches run
    int32_t n_drafted;   // draft tokens proposed
    int32_t n_accepted;  // draft tokens the target confirmed
    int32_t n_emitted;   // tokens produced by steps (accepted + one sampled per step)
    double  t_draft_ms, t_verify_ms;
    double  t_feed_ms;   // EAGLE: feeding the accepted tokens' features to the head; 0 for the others
};

// NULL on error (specee_drafter_last_error). The caller keeps draft_model loaded until the drafter is freed.
LLAMA_API struct specee_drafter * specee_drafter_init(struct llama_context * ctx_tgt, const char * type,
                                                      struct llama_model * draft_model, int32_t n_draft, int32_t n_threads);
// The combined mode: the copy drafter bound to an early-exit handle (not owned: free the drafter
// first). Where the copy drafter drafts nothing a step is specee_ee_step (early exits), else its
// drafts are verified by specee_ee_verify at full depth: every token a verify emits is the target's.
struct specee_ee;
LLAMA_API struct specee_drafter * specee_drafter_init_exits(struct llama_context * ctx_tgt, struct specee_ee * ee,
                                                            int32_t n_draft);
LLAMA_API void specee_drafter_free(struct specee_drafter * d);
// Message of the last failed specee_drafter_* call on this thread.
LLAMA_API const char * specee_drafter_last_error(void);
// The draft context's threads (the worker lowers them with the target's while another process is busy).
LLAMA_API void specee_drafter_set_threads(struct specee_drafter * d, int32_t n_threads);
// "eagle" only (the copy drafter always is, the others never): each step verifies only as many of the
// head's chain drafts as pay on this machine, from the head's calibrated confidence in each and the
// measured cost of a verify per row count (draft-gate.h); 0 of them is a plain one-row decode.
// Off (the default): every step verifies n_draft drafts, as llama.cpp's --draft does.
LLAMA_API void specee_drafter_set_gated(struct specee_drafter * d, bool gated);
// What the gate has learnt so far: how often the target confirmed the head's first chain draft and
// its later ones, per tenth of the head's probability; the measured ms of a verify of 1..4 rows, of
// the head's work every step and of one chained draft (0 where not measured yet). False for drafters
// without a gate.
struct specee_gate_info {
    double first[10], later[10];
    double verify_ms[4];
    double step_ms, draft_ms;
};
LLAMA_API bool specee_drafter_gate_info(const struct specee_drafter * d, struct specee_gate_info * info);

// Decode tokens[n_keep-1 .. n) on the target (its KV must hold tokens[0 .. n_keep)), let the drafter
// see them, and sample the first answer token with smpl (NULL: greedy, as specee_greedy picks).
// Returns it, or -1 on error.
LLAMA_API llama_token specee_drafter_prefill(struct specee_drafter * d, const llama_token * tokens, int32_t n_tokens,
                                             int32_t n_keep, struct llama_sampler * smpl);

// One speculative step: draft, verify, write the 1..n_draft+1 newly sampled tokens to out (at most
// max_out; smpl NULL: greedy). Returns the count, 0 when the context is full, -1 on error. stats may be NULL.
LLAMA_API int32_t specee_drafter_step(struct specee_drafter * d, struct llama_sampler * smpl, llama_token * out,
                                      int32_t max_out, struct specee_drafter_stats * stats);

// Steps (as specee_drafter_step, at most per_step tokens each) while out has room for another's
// per_step tokens and budget_us has not passed (at least one step): the caller's per-step round
// trip saved. Stops after a step that gave an end-of-generation token. Returns the tokens
// written, 0 when the context is full, -1 on error.
LLAMA_API int32_t specee_drafter_steps(struct specee_drafter * d, struct llama_sampler * smpl, llama_token * out,
                                       int32_t max_out, int32_t per_step, int64_t budget_us,
                                       struct specee_drafter_stats * stats);

// Tokens now in the target's KV cache (the prompt and all emitted tokens but the newest).
LLAMA_API int32_t specee_drafter_n_past(const struct specee_drafter * d);
LLAMA_API void    specee_drafter_reset_stats(struct specee_drafter * d);
// The drafter's own context (an EAGLE head's, a draft model's), NULL for the n-gram drafters: its
// sequence 0 holds the head's cache of the prefix, which the worker saves and restores beside the
// target's (llama_state_seq_*) so that a kept conversation drafts as it would have gone on.
LLAMA_API struct llama_context * specee_drafter_draft_context(const struct specee_drafter * d);
// The copy drafter's estimate of how often a draft token is confirmed, per match length it drafted
// from (2, 3, 4, 5-7, 8-15, 16+) with one earlier occurrence of the last two tokens, then the same
// six where several occurred and all went on alike, then where they did not: at most n values
// written to p; returns how many (0 for the other drafters).
LLAMA_API int32_t specee_drafter_copy_acceptance(const struct specee_drafter * d, double * p, int32_t n);
// The copy drafter's lookup on the tokens ctx[0..n) followed by `last` (tests compare it with
// engine/sequences.py's CopyLookup): the end position of the longest earlier occurrence of their
// last tokens (-1: none), its length in *match_len, and up to max_out of the tokens that followed
// it in out; *n_out says how many.
LLAMA_API int32_t specee_copy_lookup(const llama_token * ctx, int32_t n, llama_token last, int32_t max_out,
                                     llama_token * out, int32_t * n_out, int32_t * match_len);

// ---- SpecEE early exit (early-exit.cpp) ----------------------------------------------------
// Each step decodes one token with the target; the EAGLE head's top-n_cand tokens are the
// candidates. After chosen layers a predictor reads the candidates' logits at that depth; when it
// is confident the graph jumps past the remaining layers (patch 0002), writes their K/V from the
// exit state, and the token is taken among the candidates. No lm_head runs at an exit.

#define SPECEE_EE_MAX_LAYERS 128
#define SPECEE_EE_N_FEATURES 14  // predictor inputs (early-exit.cpp exit_features)
#define SPECEE_EE_N_VOCAB_FEATURES 3  // draft-vocabulary head predictor inputs (vocab_features)

struct specee_ee;

struct specee_ee_stats {
    int32_t n_steps;            // tokens decoded by early-exit steps
    int32_t n_exits;            // steps that stopped before the full lm_head
    int32_t n_vocab_exits;      // of those, steps the draft-vocabulary head settled after the last layer
    int32_t n_cand_hits;        // steps whose token was among the candidates
    int64_t n_layers_run;       // layers computed, summed over steps
    int32_t n_shadow;           // steps also run at full depth to check the exit decision
    int32_t n_shadow_exits;     // of those, steps that exited
    int32_t n_shadow_correct;   // of those, exits whose token equals the full-depth token
    int32_t exit_hist[SPECEE_EE_MAX_LAYERS + 1];  // steps ending after layer L; [n_layer] = full depth
    double  t_draft_ms, t_target_ms, t_other_ms;
    int32_t n_confirmed;        // steps whose exit onto an end-of-generation or stop token was declined
};

// The attention a draft context (EAGLE head, draft model) should use: the target context's, resolved
// (flash attention on or off). Default context params ask for "auto", which turned flash attention on
// for a head on a GPU while the target ran without it (and Mesa's lavapipe crashes in its shader).
LLAMA_API enum llama_flash_attn_type specee_flash_attn_type(const struct llama_context * ctx);

// The architectures whose graph builders call our exit hooks and store the layer inputs EAGLE heads
// read, as GGUF general.architecture names separated by commas ("llama,qwen2,qwen3"); the string
// is static. The one list: specee_exit_arch_supported and Python (engine/native.py) both read it.
LLAMA_API const char * specee_exit_archs(void);

// Whether early exit can run on this model: its architecture is in specee_exit_archs().
// Other models run the other modes.
LLAMA_API bool specee_exit_arch_supported(const struct llama_model * model);

// Bind early exit to a target context and a loaded EAGLE-3 head (kept loaded by the caller until
// specee_ee_free): the head's top n_cand tokens are the candidates (an exit may pick any of them);
// its context runs n_threads. NULL on error (specee_last_error).
LLAMA_API struct specee_ee * specee_ee_init(struct llama_context * ctx_tgt, struct llama_model * head, int32_t n_cand,
                                            int32_t n_threads);
LLAMA_API void specee_ee_free(struct specee_ee * x);
// The head context's threads (as specee_drafter_set_threads).
LLAMA_API void specee_ee_set_threads(struct specee_ee * x, int32_t n_threads);
// The EAGLE head's context (as specee_drafter_draft_context): its cache of the prefix is kept beside
// the target's, so that a conversation restored later gets the same candidates as it would have.
LLAMA_API struct llama_context * specee_ee_draft_context(const struct specee_ee * x);

// Predictor for exits after layer `layer`: z = w2 . relu(W1 f + b1) + b2 with f the
// SPECEE_EE_N_FEATURES features of the candidates' logits (see exit_features); exit when
// z > threshold. W1 is [n_hidden x N_FEATURES], row-major. Returns 0, or -1 on bad arguments.
LLAMA_API int32_t specee_ee_set_predictor(struct specee_ee * x, int32_t layer, int32_t n_hidden, const float * w1,
                                          const float * b1, const float * w2, float b2, float threshold);
LLAMA_API void specee_ee_clear_predictors(struct specee_ee * x);

// After the last layer, the shortlist (the lm_head rows of the head's draft vocabulary, d2t, and
// of the tokens in the target's cache it lacks, up to 2048) can stand in for the full lm_head:
// when w . f + b > threshold (f: top logit, top-1/top-2 margin, log-sum-exp minus top) the token
// is their arg max. w NULL turns it off. -1 if the head has no d2t.
LLAMA_API int32_t specee_ee_set_vocab_predictor(struct specee_ee * x, const float * w, float b, float threshold);

// exits: use the predictors; force_layer >= 0: exit at that layer on every step (tests);
// shadow_every > 0: every Nth step also runs full depth to measure exit precision (greedy only);
// temperature <= 0: greedy choice among the candidates at an exit, else sample them with seed.
LLAMA_API void specee_ee_configure(struct specee_ee * x, bool exits, int32_t force_layer, int32_t shadow_every,
                                   float temperature, uint32_t seed);

// The predictor features (SPECEE_EE_N_FEATURES floats) for candidate logits l at a layer, lp at
// the layer before (NULL at layer 0) and the head's log-probabilities of the candidates.
LLAMA_API void specee_exit_features(const float * l, const float * lp, const float * draft_lp, int32_t n_cand, float * out);

// End-of-generation tokens are never emitted by an exit (the full lm_head decides, so an answer
// never ends early on a premature exit); these tokens (the request's stop strings) are treated
// alike. Replaces the previous set; n_tokens 0 leaves end-of-generation tokens only.
LLAMA_API void specee_ee_set_stop_tokens(struct specee_ee * x, const llama_token * tokens, int32_t n_tokens);

// fill = false leaves the skipped layers' K/V unwritten at an exit (SpecEE's original policy;
// only for measuring what the fill is worth). Default true.
LLAMA_API void specee_ee_set_fill(struct specee_ee * x, bool fill);

// false: the EAGLE head never runs (no candidates, so no exit before the last layer): only the
// shortlist's exits after it, for predictors without layers (set before a prefill; default true).
LLAMA_API void specee_ee_set_use_head(struct specee_ee * x, bool on);

// Prompt prefill (as specee_drafter_prefill), then the first candidates.
LLAMA_API llama_token specee_ee_prefill(struct specee_ee * x, const llama_token * tokens, int32_t n_tokens,
                                        int32_t n_keep, struct llama_sampler * smpl);

// One token. record ((n_layer + 2) * n_cand floats) and cands (n_cand) may be NULL; when record
// is given the step runs full depth and stores every layer's candidate logits, the head's
// log-probabilities of the candidates, then the draft-vocabulary head's features and arg max
// token (predictor training).
// Returns 1, 0 when the context is full, -1 on error.
LLAMA_API int32_t specee_ee_step(struct specee_ee * x, struct llama_sampler * smpl, llama_token * out, float * record,
                                 llama_token * cands, struct specee_ee_stats * stats);
LLAMA_API void specee_ee_reset_stats(struct specee_ee * x);
// A verify batch in place of a step (the combined mode: a drafter proposed draft[0..k), k >= 1):
// [the pending token, drafts] decode at full depth, every emitted token is sampled from the full
// lm_head's logits as specee_drafter_step's are (exact), and the accepted rows feed the head, whose
// last row gives the next step's candidates. Writes the accepted drafts and the target's next token
// to out (k + 1 slots); returns how many, or -1 on error. specee_ee_stats count exit steps only.
LLAMA_API int32_t specee_ee_verify(struct specee_ee * x, struct llama_sampler * smpl, const llama_token * draft,
                                   int32_t k, llama_token * out);
// Tokens now in the target's KV cache (as specee_drafter_n_past).
LLAMA_API int32_t specee_ee_n_past(const struct specee_ee * x);
LLAMA_API void    specee_ee_get_stats(const struct specee_ee * x, struct specee_ee_stats * stats);

// ---- Placement (placement.cpp) --------------------------------------------------------------

// For models loaded after this call: n_first >= 0 puts layers [0, n_first) (and the output head
// when output_on_gpu) on the first GPU and the rest on the CPU, the SpecEE layout; -1 restores
// upstream's layout, where n_gpu_layers offloads the last layers. Each layer's KV follows it.
LLAMA_API void specee_set_first_layers_on_gpu(int32_t n_first, bool output_on_gpu);

// Sustained memory read bandwidth in GB/s with n_threads threads streaming n_bytes in all (the
// planner's CPU speed; decode reads every weight once per token). The median of five passes.
LLAMA_API double specee_measure_read_bandwidth(int32_t n_threads, int64_t n_bytes);

// JSON array of ggml's backend devices: name, description, backend, type (cpu, gpu, igpu, accel),
// memory_free, memory_total (bytes). Valid until the next call on this thread.
LLAMA_API const char * specee_devices_json(void);

// llama.cpp's dry-run memory measurement for a model at a context length and placement (nothing
// is allocated): JSON {"host": {model, context, compute}, "device": {...}} in bytes, or NULL
// when the model cannot be opened. Valid until the next call on this thread.
LLAMA_API const char * specee_measure_memory(const char * model_path, int32_t n_ctx, int32_t n_gpu_layers, int32_t n_first,
                                             bool output_on_gpu);

// ---- Greedy pick (greedy.cpp) -------------------------------------------------------------------
// The arg max of the logits of batch row idx (-1: the last), the first of equal maxima: the token
// llama.cpp's greedy sampler picks, without the chain's copy of every logit into a candidate array.
// Only for a chain that is greedy alone (no grammar, penalties or biases). LLAMA_TOKEN_NULL (-1) when
// the row has no logits.
LLAMA_API llama_token specee_greedy(struct llama_context * ctx, int32_t idx);
// smpl's pick at row idx (llama.cpp's sampler chain, which accepts it), or specee_greedy's when smpl
// is NULL: how every decoding loop here samples.
LLAMA_API llama_token specee_pick(struct llama_sampler * smpl, struct llama_context * ctx, int32_t idx);

// ---- Plain decoding's loop (vanilla-run.cpp) --------------------------------------------------
// Goes on with sequence 0's answer without returning to the caller: picks the next token from the
// last logits (smpl: llama.cpp's sampler chain, which accepts it; NULL: specee_greedy's arg max),
// writes it to out and decodes it at the next position, until it has written n_max tokens, an
// end-of-generation token, a token the context has no room to decode after (pos + 1 >= n_ctx), or
// budget_us microseconds have passed (at least one token a call). The last token written is not
// decoded: the context's logits are still those it was picked from, and the caller passes it back as
// `pending` (decoded first, at `pos`) to go on, or -1 when nothing waits. Returns the tokens written,
// every one but the last decoded; < 0 when llama_decode failed (the cache's end is then unknown).
LLAMA_API int32_t specee_vanilla_run(struct llama_context * ctx, struct llama_sampler * smpl, llama_token pending,
                                     int32_t pos, int32_t n_ctx, int32_t n_max, int64_t budget_us, llama_token * out);

// ---- Interrupting a decode (interrupt.cpp) ----------------------------------------------------
// An abort callback for llama_set_abort_callback(ctx, specee_interrupt_requested, flag): the decode
// stops between graph nodes once another thread sets the bool at `flag`, and llama_decode returns 2
// with the batch's positions removed from the cache (`specee serve`'s batch gives way to a request
// that just came rather than making it wait out a step). The CPU backend asks; others run to the end.
LLAMA_API bool specee_interrupt_requested(void * flag);
// Drops llama_decode's per-sequence warning about the rows of a stopped batch (routine for an
// interrupted step) before the log callback set now; other lines pass. Once per process suffices.
LLAMA_API void specee_interrupt_quiet_log(void);

#ifdef __cplusplus
}
#endif

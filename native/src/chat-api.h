// SpecEE Chat's C API for chat templates with tool calls (spec/chat-tools.cpp, in libspecee-spec):
// llama.cpp's own common/chat (templates, tool-call grammars, output parsers) behind JSON strings.
// A header of its own beside specee.h, so that libllama's sources do not recompile for it.
#pragma once

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

// A handle reads its model vocabulary-only; use one from one thread at a time. Returned strings are
// the handle's, valid until its next call; NULL on error (specee_chat_last_error).
struct specee_chat;

LLAMA_API struct specee_chat * specee_chat_init(const char * model_path);
LLAMA_API void specee_chat_free(struct specee_chat * c);
LLAMA_API const char * specee_chat_last_error(void);
// {"supports_tools": bool, "supports_tool_calls": bool, "supports_parallel_tool_calls": bool, ...}
LLAMA_API const char * specee_chat_caps(struct specee_chat * c);
// {"messages": OpenAI messages, "tools": [...], "tool_choice": "auto"|"required"|"none",
//  "parallel_tool_calls": bool, "continue_final_message": bool} ->
// {"prompt", "format", "format_id", "grammar", "grammar_lazy", "trigger_patterns": [regex],
//  "trigger_tokens": [id], "grammar_prefill": [id] (fed to a whole-answer grammar before sampling),
//  "preserved_tokens": [id] (special tokens the answer's text must show), "additional_stops",
//  "generation_prompt", "parser"}
LLAMA_API const char * specee_chat_apply(struct specee_chat * c, const char * request_json);
// The generated text as an OpenAI assistant message {"role", "content", "tool_calls": [{"type",
// "function": {"name", "arguments"}}], "reasoning_content"}. parser_json: apply's result (format_id,
// generation_prompt, parser) with "parse_tool_calls" and "continue_final_message"; partial: the
// text so far of an unfinished answer.
LLAMA_API const char * specee_chat_parse(struct specee_chat * c, const char * text, bool partial, const char * parser_json);

#ifdef __cplusplus
}
#endif

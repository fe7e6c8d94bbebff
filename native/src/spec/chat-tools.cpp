// specee_chat_*: a model's chat templates with tool calls, through llama.cpp's own common/chat
// (chat-api.h). Apply: OpenAI messages + tools + tool_choice -> the prompt, the grammar that makes the
// answer a valid call (lazy: only once the template's tool-call opening appears, for tool_choice
// auto), its triggers as the sampler takes them, and the parser; parse: generated text -> an
// OpenAI-shaped message (content + tool_calls). JSON strings in and out, so the C API stays small.
// The model is read vocabulary-only (no weights): the templates, BOS/EOS and the tokenizer for the
// trigger and preserved tokens, the same ids the engine's copy of the model has.
// Built into libspecee-spec (patch 0006) with the drafters: llama.cpp's common library links libllama.
#include "chat-api.h"

#include "chat.h"
#include "common.h"
#include "json-schema-to-grammar.h"
#include "json.h"

#include <cctype>
#include <exception>
#include <string>
#include <vector>

using json = common_json;

namespace {

thread_local std::string g_error;

// the token of a text that tokenizes to exactly one (special) token, else LLAMA_TOKEN_NULL
llama_token single_token(const llama_vocab * vocab, const std::string & text) {
    const auto ids = common_tokenize(vocab, text, false, true);
    return ids.size() == 1 ? ids[0] : LLAMA_TOKEN_NULL;
}

// The rule `name ::= ...` of a grammar as llama.cpp's builder writes it (one rule a line), or "".
std::string grammar_rule(const std::string & grammar, const std::string & name) {
    const std::string head = name + " ::= ";
    for (size_t at = 0; at < grammar.size();) {
        size_t end = grammar.find('\n', at);
        end = end == std::string::npos ? grammar.size() : end;
        if (grammar.compare(at, head.size(), head) == 0) {
            return grammar.substr(at, end - at);
        }
        at = end + 1;
    }
    return "";
}

// tool_choice required as OpenAI means it: calls only. llama.cpp's required grammar lets free text
// come before the calls (up to the opening marker), which a model may write until max_tokens. The
// calls are the parser's trigger rules, the root a lazy build of the same parser starts at; that
// build comes from the saved parser, which keeps no argument schemas, so only its root line is
// taken, over the full grammar's rules (same parser, same rule names). "" where that does not hold.
// Without parallel calls, one call: the single-call rule where the parser has one (its root also
// offers the several-calls rule whatever parallel_tool_calls says).
std::string calls_only_grammar(const common_chat_params & params, bool parallel) {
    if (params.grammar.empty() || params.parser.empty()) {
        return "";
    }
    common_peg_arena arena;
    arena.load(params.parser);
    const std::string lazy = build_grammar([&](const common_grammar_builder & b) { arena.build_grammar(b, true); });
    std::string root = grammar_rule(lazy, "root");
    const std::string full_root = grammar_rule(params.grammar, "root");
    if (root.empty() || full_root.empty()) {
        return "";
    }
    bool single = false;
    size_t from = root.find(" ::= ") + 5;
    while (from < root.size()) {  // "root ::= a | b": every rule named must be in the full grammar
        size_t bar = root.find(" | ", from);
        bar = bar == std::string::npos ? root.size() : bar;
        const std::string name = root.substr(from, bar - from);
        if (grammar_rule(params.grammar, name).empty()) {
            return "";
        }
        single = single || name == "tool-call";
        from = bar + 3;
    }
    if (!parallel && single) {
        root = "root ::= tool-call";
    }
    std::string out = params.grammar;
    out.replace(out.find(full_root), full_root.size(), root);
    return out;
}

}  // namespace

struct specee_chat {
    llama_model * model = nullptr;  // vocabulary only
    common_chat_templates_ptr tmpls;
    std::string out;             // the last result handed out (valid until the next call)
    std::string parser_src;      // the parser last loaded, kept for the next partial parse
    common_peg_arena parser;
};

const char * specee_chat_last_error(void) {
    return g_error.c_str();
}

specee_chat * specee_chat_init(const char * model_path) {
    try {
        llama_model_params mp = llama_model_default_params();
        mp.vocab_only = true;
        llama_model * model = llama_model_load_from_file(model_path, mp);
        if (model == nullptr) {
            g_error = std::string("could not read the model file ") + model_path;
            return nullptr;
        }
        auto * c = new specee_chat();
        c->model = model;
        try {
            c->tmpls = common_chat_templates_init(model, "");
        } catch (...) {
            specee_chat_free(c);
            throw;
        }
        return c;
    } catch (const std::exception & ex) {
        g_error = std::string("the model's chat template cannot be used: ") + ex.what();
        return nullptr;
    }
}

void specee_chat_free(specee_chat * c) {
    if (c == nullptr) {
        return;
    }
    c->tmpls.reset();
    if (c->model != nullptr) {
        llama_model_free(c->model);
    }
    delete c;
}

const char * specee_chat_caps(specee_chat * c) {
    json caps = json::object();
    for (const auto & [name, on] : common_chat_templates_get_caps(c->tmpls.get())) {
        caps[name] = on;
    }
    c->out = caps.dump();
    return c->out.c_str();
}

const char * specee_chat_apply(specee_chat * c, const char * request_json) {
    try {
        const json req = json::parse(request_json);
        common_chat_templates_inputs in;
        in.messages = common_chat_msgs_parse_oaicompat(req.at("messages"));
        in.tools = common_chat_tools_parse_oaicompat(req.value("tools", json::array()));
        in.tool_choice = common_chat_tool_choice_parse_oaicompat(req.value("tool_choice", std::string("auto")));
        in.parallel_tool_calls = req.value("parallel_tool_calls", true);
        if (req.value("continue_final_message", false)) {  // an assistant prefix to continue
            in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
            in.add_generation_prompt = false;
        }
        common_chat_params params = common_chat_templates_apply(c->tmpls.get(), in);
        bool grammar_from_prompt = !params.grammar_lazy;  // llama.cpp's whole-answer grammars start at the generation prompt
        if (in.tool_choice == COMMON_CHAT_TOOL_CHOICE_REQUIRED && !params.supports_thinking) {
            std::string calls_only = calls_only_grammar(params, in.parallel_tool_calls);
            if (!calls_only.empty()) {
                params.grammar = calls_only;
                grammar_from_prompt = false;
            }
        }

        // the sampler's view of the grammar (what common/sampling does with common_chat_params)
        const llama_vocab * vocab = llama_model_get_vocab(c->model);
        json preserved = json::array();
        for (const auto & text : params.preserved_tokens) {
            const llama_token t = single_token(vocab, text);
            if (t != LLAMA_TOKEN_NULL) {
                preserved.push_back(t);
            }
        }
        json patterns = json::array();
        json tokens = json::array();
        for (const auto & trigger : params.grammar_triggers) {
            switch (trigger.type) {
                case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:
                case COMMON_GRAMMAR_TRIGGER_TYPE_WORD: {
                    // a word that is one token triggers as that token, as llama-server does
                    const llama_token t = trigger.token != LLAMA_TOKEN_NULL ? trigger.token : single_token(vocab, trigger.value);
                    if (t != LLAMA_TOKEN_NULL) {
                        tokens.push_back(t);
                    } else {
                        patterns.push_back(regex_escape(trigger.value));
                    }
                    break;
                }
                case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:
                    patterns.push_back(trigger.value);
                    break;
                case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: {
                    const std::string & p = trigger.value;
                    patterns.push_back(p.empty() ? std::string("^$")
                                                 : (p.front() == '^' ? "" : "^") + p + (p.back() == '$' ? "" : "$"));
                    break;
                }
            }
        }
        // a whole-answer grammar starts at the generation prompt: the sampler is fed its tokens first
        json prefill = json::array();
        if (!params.grammar.empty() && grammar_from_prompt && !params.generation_prompt.empty()) {
            const auto ids = common_tokenize(vocab, params.generation_prompt, false, true);
            for (size_t i = 0; i < ids.size(); i++) {
                const std::string piece = common_token_to_piece(vocab, ids[i], true);
                if (i == 0 && !piece.empty() && std::isspace((unsigned char) piece[0]) &&
                    !std::isspace((unsigned char) params.generation_prompt[0])) {
                    continue;  // a tokenizer's space before the first special token
                }
                prefill.push_back(ids[i]);
            }
        }
        json out = json::object();
        out["prompt"] = params.prompt;
        out["format"] = common_chat_format_name(params.format);
        out["format_id"] = (int) params.format;
        out["grammar"] = params.grammar;
        out["grammar_lazy"] = params.grammar_lazy;
        out["trigger_patterns"] = patterns;
        out["trigger_tokens"] = tokens;
        out["grammar_prefill"] = prefill;
        out["preserved_tokens"] = preserved;
        out["additional_stops"] = params.additional_stops;
        out["generation_prompt"] = params.generation_prompt;
        out["parser"] = params.parser;
        c->out = out.dump();
        return c->out.c_str();
    } catch (const std::exception & ex) {
        g_error = ex.what();
        return nullptr;
    }
}

const char * specee_chat_parse(specee_chat * c, const char * text, bool partial, const char * parser_json) {
    try {
        const json spec = json::parse(parser_json);
        common_chat_parser_params params;
        params.format = (common_chat_format) spec.value("format_id", 0);
        params.generation_prompt = spec.value("generation_prompt", std::string());
        params.parse_tool_calls = spec.value("parse_tool_calls", true);
        params.is_continuation = spec.value("continue_final_message", false);
        const std::string src = spec.value("parser", std::string());
        if (src != c->parser_src) {  // streaming parses the growing answer again and again with one parser
            c->parser = common_peg_arena();
            if (!src.empty()) {
                c->parser.load(src);
            }
            c->parser_src = src;
        }
        const common_chat_msg msg = common_chat_peg_parse(c->parser, text, partial, params);
        c->out = msg.to_json_oaicompat().dump();
        return c->out.c_str();
    } catch (const std::exception & ex) {
        g_error = ex.what();
        return nullptr;
    }
}

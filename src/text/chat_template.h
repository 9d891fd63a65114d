// Chat formats of the Kimi family, rendered in C++ (no Jinja engine at run time).
//
// kimi-k2 (Kimi K2 / Kimi Linear): the format of moonshotai/Kimi-K2-Instruct's chat template
//   <|im_system|>system<|im_middle|>...<|im_end|><|im_user|>user<|im_middle|>...<|im_end|>
//   <|im_assistant|>assistant<|im_middle|>...<|im_end|>, generation prompt
//   <|im_assistant|>assistant<|im_middle|>. As that template does, a conversation that does not
//   start with a system message gets "You are Kimi, an AI assistant created by Moonshot AI."
//   (followed by the template's stray "\n"), a message's `name` replaces its role name, and a
//   tool result is "## Return of functions.<name>:0\n<content>" in an <|im_system|> turn.
// kimi-k3 (XTML): the format of llama.cpp's Kimi-K3.jinja, which llama.cpp's converter writes
//   into K3 GGUFs (K3 itself renders chats in Python, encoding_k3.py; we found no Jinja template
//   published by Moonshot, so llama.cpp's is the reference here):
//   <|open|>message role="user"<|sep|>...<|close|>message<|sep|><|end_of_msg|>; assistant turns
//   hold a `think` channel (when thinking is on) and a `response` channel; thinking is on by
//   default and adds the thinking-effort system message (effort low / high / max, default max).
//   The generation prompt opens the assistant message and its think (or response) channel.
// Both are checked byte for byte against the Jinja templates rendered by jinja2
// (tests/data/text/chat_golden.json, tools/text/gen_chat_goldens.py). Tool declarations and tool
// calls inside assistant messages, images and response formats are not rendered (yet).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::text {

class Tokenizer;

enum class ChatFormat { KimiK2, KimiK3 };

struct ChatMessage {
    std::string role;                // system, user, assistant, tool
    std::string content;
    std::string reasoning_content;   // assistant thinking (K3 think channel)
    std::string name;                // optional: K2 role name override, K3 name attribute, tool name
};

struct ChatOptions {
    bool add_generation_prompt = true;
    bool thinking = true;                     // K3 only
    std::string thinking_effort = "max";      // K3: low, high, max; "" = no effort message
};

const char* chat_format_name(ChatFormat f);
// "kimi-k2" (also "k2", "kimi-linear"), "kimi-k3" (also "k3", "xtml"). nullopt if unknown.
std::optional<ChatFormat> chat_format_from_name(std::string_view name);
// Picks the format from a GGUF's tokenizer.chat_template by its markers; with no template (or
// no marker), from the special tokens the vocabulary has, if given. nullopt when undecidable.
std::optional<ChatFormat> detect_chat_format(std::string_view chat_template, const Tokenizer* vocab = nullptr);

// Renders the conversation. Throws kinfer::Error on an unknown role, a tool message without a
// name (K3), or an unsupported thinking effort.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& opts = {});

// The text that ends an assistant turn in the given format (what to stop on when the model
// writes it as text rather than as the end-of-generation token).
std::vector<std::string> chat_stop_strings(ChatFormat format);

// Splits an assistant's generated text (after the generation prompt) into its thinking and its
// response: K3 `...<|close|>think<|sep|><|open|>response<|sep|>...<|close|>response<|sep|>`, K2
// `<think>...</think>...`. Without the markers everything is response (or, for K3 with thinking
// on and no closing marker yet, everything is thinking).
struct ChatReply {
    std::string reasoning;
    std::string response;
};
ChatReply split_reply(ChatFormat format, std::string_view generated, bool thinking = true);

}  // namespace kinfer::text

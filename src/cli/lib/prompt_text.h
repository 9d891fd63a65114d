// Reading prompt text. `kinfer run -f FILE` takes the file's bytes as they are (as stdin does);
// `kinfer perplexity -f` drops one trailing newline as llama-perplexity does, so its numbers
// match. Escape sequences (\n \r \t \' \" \\ \xHH) are processed unless the user turns that
// off (--no-escape).
#pragma once
#include <string>

namespace kinfer::cli {

// Whole file as bytes; throws kinfer::Error naming the file when it cannot be read or is not a
// regular file (a directory, a FIFO, a device).
std::string read_text_file(const std::string& path);
// One trailing '\n' removed, as llama.cpp's -f handler does.
std::string read_prompt_file(const std::string& path);
// In place: \n \r \t \' \" \\ and \xHH (two hex digits) become the bytes they name; any other
// backslash pair is kept as it is.
void process_escapes(std::string& s);

}  // namespace kinfer::cli

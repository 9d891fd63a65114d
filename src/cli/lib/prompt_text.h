// Reading prompt text the way llama.cpp's tools do, so kinfer tokenizes the same bytes:
// `-f FILE` drops one trailing newline, and escape sequences (\n \r \t \' \" \\ \xHH) are
// processed unless the user turns that off (--no-escape).
#pragma once
#include <string>

namespace kinfer::cli {

// Whole file as bytes; throws kinfer::Error naming the file when it cannot be read.
std::string read_text_file(const std::string& path);
// One trailing '\n' removed, as llama.cpp's -f handler does.
std::string read_prompt_file(const std::string& path);
// In place: \n \r \t \' \" \\ and \xHH (two hex digits) become the bytes they name; any other
// backslash pair is kept as it is.
void process_escapes(std::string& s);

}  // namespace kinfer::cli

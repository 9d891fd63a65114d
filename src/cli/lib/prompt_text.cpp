#include "cli/lib/prompt_text.h"

#include "common/error.h"
#include "common/safe_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kinfer::cli {

std::string read_text_file(const std::string& path) {
    check_input_file(path, "input");   // a directory or FIFO is refused, not read as empty or waited on
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) fail("{}: read error", path);
    return ss.str();
}

std::string read_prompt_file(const std::string& path) {
    std::string s = read_text_file(path);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

namespace {
int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
}  // namespace

void process_escapes(std::string& s) {
    std::string out;
    out.reserve(s.size());
    const size_t n = s.size();
    for (size_t i = 0; i < n; ++i) {
        if (s[i] != '\\' || i + 1 >= n) {
            out += s[i];
            continue;
        }
        const char c = s[++i];
        switch (c) {
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case 'x':
                // Exactly two hex digits, and (as llama.cpp requires) at least one byte after them.
                if (i + 2 < n && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
                    out += char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
                    i += 2;
                    break;
                }
                [[fallthrough]];
            default:
                out += '\\';
                out += c;
        }
    }
    s = std::move(out);
}

}  // namespace kinfer::cli

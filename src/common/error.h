// The one exception type kinfer throws for bad input (files, flags, prompts).
// The CLI prints what() as a single "kinfer: error: ..." line and exits non-zero, so messages
// must stand alone: name the file, the byte offset or tensor, and what was expected.
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace kinfer {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kinfer

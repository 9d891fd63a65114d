// The exception types kinfer throws for bad input (files, flags, prompts).
// The CLI prints what() as a single "kinfer: error: ..." line, so messages must stand alone:
// name the file, the byte offset or tensor, and what was expected. Exit codes: Error -> 1
// (a runtime error: a file, the model, the machine), UsageError -> 2 (the command line).
#pragma once
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace kinfer {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A command-line mistake (an unknown flag, a value out of range): exit code 2.
class UsageError : public Error {
public:
    using Error::Error;
};

template <typename... Args>
[[noreturn]] inline void usage_fail(fmt::format_string<Args...> f, Args&&... args) {
    throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kinfer

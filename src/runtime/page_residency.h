// How much of a span of memory is not in RAM, asked of the kernel with mincore(2). The expert
// store uses it to count the bytes an expert served from the file mapping will fault in from
// disk: reading the mapping copies nothing the store can see, so without this a run served from
// a cold mapping reports nothing moved (issue 16).
//
// For a file mapping, "resident" means "in the page cache": a page there costs a minor fault
// at most, one not there is read from disk. Two limits, both making the count a lower bound:
//   - Linux (since 5.0) hides the page cache of a file from a process that neither owns it nor
//     could open it for writing: mincore then says every page is resident (a side-channel
//     guard). residency_visible() tells whether a file is in that case.
//   - The kernel's read-around on a fault brings in neighbouring pages too; those count as
//     resident when their own span is asked about later, so bytes read ahead are not counted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kinfer::runtime {

size_t page_size();

// Bytes of [p, p + n) on pages that are not resident, each page counted only for its part
// inside the span (so the result is at most n). 0 for n = 0, and when mincore fails (a span
// that is not all mapped): a count, not a check of the pointer.
size_t non_resident_bytes(const void* p, size_t n);

// False when mincore would answer "resident" for every page of the file at path whatever the
// truth (see above): the file is neither owned by nor writable for this process. True for a
// path that is not a file (memory handed over as a buffer: mincore sees anonymous memory as is).
bool residency_visible(const std::string& path);

// What this whole process has caused to be read from storage so far: Linux's /proc/self/io
// read_bytes, which counts page faults, read-ahead and read(2) alike (page-cache hits not). The
// other side of the bound above: an upper one for the experts, since it counts every file and
// the dense weights too. nullopt where the kernel does not say (no task I/O accounting).
std::optional<uint64_t> storage_read_bytes();

}  // namespace kinfer::runtime

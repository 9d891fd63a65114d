// The expert store counts what the file mapping faults in from disk (count_faults, the
// --verbose-experts report): on a copy of the tiny model dropped from the page cache, the first
// pass over every expert faults, the second finds them in RAM, and the report's per-layer
// column, its totals and its per-token figure agree with the stats.
#include "store_util.h"

#include "runtime/device_sim.h"
#include "runtime/page_residency.h"

#include <cmath>
#include <fcntl.h>
#include <filesystem>
#include <sstream>
#include <unistd.h>

using namespace kinfer;
using namespace kinfer::runtime;
using kinfer::test::expert_names;
using kinfer::test::check_all;

namespace {

const std::string kColdModel = kinfer::test::data("models/k3-tiny-a-Q4_K_M.gguf");

// A copy of the tiny model in the build tree (a tmpfs would keep its pages whatever we
// advise), synced so that the page cache may drop it.
std::string cold_copy(const std::string& name) {
    const auto dir = std::filesystem::path(KINFER_BUILD_DIR) / "test-tmp";
    std::filesystem::create_directories(dir);
    const auto path = (dir / (std::to_string(::getpid()) + "_" + name)).string();
    std::filesystem::copy_file(kColdModel, path, std::filesystem::copy_options::overwrite_existing);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(::fsync(fd) == 0);
    ::close(fd);
    return path;
}

// Asks the kernel to drop the file's pages from the page cache: all but those a mapping holds,
// such as the header pages the parser read (and the pages faulted in around them).
void evict(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

void skip_if_kept(uint64_t faulted) {
    if (faulted > 0) return;
    MESSAGE("the kernel kept the model's pages after POSIX_FADV_DONTNEED: no fault to count");
    kinfer::test::skip_case(kinfer::test::SkipKind::machine, "the page cache would not drop a synced file's pages");
}

// The report's per-layer rows, split at blanks (between the header and the total line).
std::vector<std::vector<std::string>> layer_rows(const std::string& rep) {
    std::vector<std::vector<std::string>> rows;
    std::istringstream in(rep);
    std::string line;
    bool in_table = false;
    while (std::getline(in, line)) {
        if (line.starts_with("total:")) break;
        if (in_table) {
            std::istringstream w(line);
            std::vector<std::string> cols;
            for (std::string c; w >> c;) cols.push_back(c);
            rows.push_back(cols);
        }
        if (line.find("faulted MiB") != std::string::npos) in_table = true;
    }
    return rows;
}

bool contains_text(const std::string& rep, const std::string& s) { return rep.find(s) != std::string::npos; }

}  // namespace

TEST_CASE("store: the report counts the bytes faulted in from the mapping, and the totals add up") {
    const auto path = cold_copy("faults_zero_copy.gguf");
    {
        auto f = gguf::File::open(path);
        ExpertStoreOptions o;
        o.record = true;   // what --verbose-experts sets
        o.count_faults = true;
        ExpertStore s(*f, expert_names(*f), o);
        evict(path);   // again: the read-around of the header's fault brought in the whole small file
        REQUIRE(s.zero_copy());
        const auto& lay = s.layout();
        uint64_t payload = 0;
        for (const auto& L : lay.layers) payload += uint64_t(L.payload()) * uint64_t(lay.n_expert);

        check_all(s);
        const auto t1 = s.stats().total();
        CHECK(t1.uses == uint64_t(lay.n_moe_layers() * lay.n_expert));
        CHECK(t1.mapped_uses == t1.uses);
        CHECK(t1.bytes_faulted <= payload);   // the experts' own bytes, nothing around them
        skip_if_kept(t1.bytes_faulted);
        if (t1.bytes_faulted > 0) CHECK(t1.mapped_resident < t1.mapped_uses);

        check_all(s);   // everything is in RAM now: nothing more to fault
        const auto st = s.stats();
        const auto t2 = st.total();
        CHECK(t2.bytes_faulted == t1.bytes_faulted);
        CHECK(t2.mapped_resident == t1.mapped_resident + t1.mapped_uses);

        const std::string rep = s.report();
        CAPTURE(rep);
        CHECK(contains_text(rep, "faulted MiB"));
        CHECK(contains_text(rep, "in RAM%"));
        CHECK(contains_text(rep, "hit rate - (no cache)"));   // no cache: no hit rate to claim
        CHECK(contains_text(rep, fmt::format("mapped uses in RAM {:.1f}% ({} of {})",
                                   100.0 * double(t2.mapped_resident) / double(t2.mapped_uses), t2.mapped_resident,
                                   t2.mapped_uses)));
        CHECK(contains_text(rep, "faulted from the mapping " + format_bytes(double(t2.bytes_faulted))));
        CHECK(contains_text(rep, format_bytes(double(t2.bytes_faulted) / double(st.tokens)) + " per token moved"));
        if (storage_read_bytes()) CHECK(contains_text(rep, "read from storage by the whole process since the store opened"));
        const auto rows = layer_rows(rep);
        CHECK(rows.size() == size_t(lay.n_moe_layers()));
        double sum_mib = 0;
        for (const auto& r : rows) {
            REQUIRE(r.size() == 11);
            CHECK(r[2] == "-");   // hit%
            sum_mib += std::stod(r[7]);
        }
        // Each row rounds to 0.01 MiB.
        CHECK(std::abs(sum_mib - double(t2.bytes_faulted) / 1048576.0) <= 0.005 * double(rows.size()) + 1e-9);
    }
    std::filesystem::remove(path);
}

TEST_CASE("store: device copies made from the mapping count its faulted bytes; a store not counting says so") {
    const auto path = cold_copy("faults_device.gguf");
    {
        auto f = gguf::File::open(path);
        const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
        SimDevice dev({lay.max_expert_bytes() * 40, 50.0});
        ExpertStoreOptions o;
        o.device = &dev;   // no host tier: copies read the mapping
        o.count_faults = true;
        ExpertStore s(*f, expert_names(*f), o);
        evict(path);
        check_all(s);
        const auto t = s.stats().total();
        CHECK(t.mapped_uses == 0);   // every acquire was served by the device
        CHECK(t.bytes_copied > 0);
        skip_if_kept(t.bytes_faulted);
        const std::string rep = s.report();
        CAPTURE(rep);
        CHECK(contains_text(rep, "mapped uses in RAM - (0 of 0)"));
        CHECK(contains_text(rep, "faulted from the mapping " + format_bytes(double(t.bytes_faulted))));
        CHECK(!contains_text(rep, "hit rate -"));   // the device layers have a cache and a hit rate
    }
    {
        auto f = gguf::File::open(path);
        ExpertStoreOptions o;
        o.record = true;
        ExpertStore s(*f, expert_names(*f), o);
        check_all(s);
        CHECK(s.stats().total().bytes_faulted == 0);
        const std::string rep = s.report();
        CAPTURE(rep);
        CHECK(contains_text(rep, "faulted from the mapping not counted"));
        for (const auto& r : layer_rows(rep)) {
            REQUIRE(r.size() == 11);
            CHECK(r[7] == "-");
        }
    }
    std::filesystem::remove(path);
}

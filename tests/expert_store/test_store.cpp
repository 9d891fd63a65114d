// The expert store on the shipped tiny models: every tier hands out the file's exact bytes,
// hit counting follows the policy, one expert in flight is read once, broken data is reported
// with layer, expert and offset, and the simulated device's copy engine keeps its bandwidth.
#include "store_util.h"

#include "runtime/device_sim.h"

#include <array>
#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <unistd.h>

using namespace kinfer;
using namespace kinfer::runtime;
using kinfer::test::expert_names;
using kinfer::test::n_layer_of;
using kinfer::test::check_all;
using kinfer::test::same_bytes;

namespace {

const std::string kModel = kinfer::test::data("models/k3-tiny-a-Q4_K_M.gguf");

// A directory in the build tree (KINFER_BUILD_DIR), not the temp directory: /tmp is often a
// tmpfs, which refuses O_DIRECT, and then the store silently reads buffered. Empty (with a skip
// notice) when even the build directory's filesystem refuses O_DIRECT.
std::string direct_io_dir() {
    const auto dir = std::filesystem::path(KINFER_BUILD_DIR) / "test-tmp";
    std::filesystem::create_directories(dir);
    const auto probe = (dir / "o_direct_probe").string();
    { std::ofstream(probe) << std::string(4096, 'x'); }
    const int fd = ::open(probe.c_str(), O_RDONLY | O_DIRECT);
    if (fd >= 0) ::close(fd);
    std::filesystem::remove(probe);
    if (fd < 0) {
        kinfer::test::skip_case(kinfer::test::SkipKind::machine,
                                "the build directory's filesystem refuses O_DIRECT: direct I/O is read buffered");
        return {};
    }
    return dir.string();
}


}  // namespace

TEST_CASE("store: layout of the tiny model") {
    auto f = gguf::File::open(kModel);
    const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
    CHECK(lay.n_expert == 32);
    CHECK(!lay.layers[0].present());   // leading dense layer
    CHECK(lay.n_moe_layers() == n_layer_of(*f) - 1);
    for (const auto& L : lay.layers)
        if (L.present()) {
            CHECK(L.bytes % 64 == 0);
            CHECK(L.payload() * size_t(lay.n_expert) == L.t[0]->nbytes + L.t[1]->nbytes + L.t[2]->nbytes);
        }
}

TEST_CASE("store: every configuration hands out the file's bytes") {
    auto f = gguf::File::open(kModel);
    const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
    size_t one_per_layer = 0;
    for (const auto& L : lay.layers) one_per_layer += L.bytes;

    SUBCASE("zero-copy view") {
        ExpertStore s(*f, expert_names(*f), {});
        CHECK(s.zero_copy());
        ExpertRef r = s.acquire(1, 5);
        CHECK(r.tier == Tier::mapped);
        CHECK(r.part[0] == f->tensor("blk.1.ffn_gate_exps.weight").data + 5 * lay.layers[1].slice[0]);
        check_all(s);
    }
    SUBCASE("host tiers") {
    for (ExpertIo io : {ExpertIo::mmap, ExpertIo::pread, ExpertIo::direct})
        for (bool async : {false, true}) {
            CAPTURE(expert_io_name(io));
            CAPTURE(async);
            ExpertStoreOptions o;
            o.io = io;
            o.async = async;
            o.ram_budget = one_per_layer;   // one expert per layer
            ExpertStore s(*f, expert_names(*f), o);
            CHECK(!s.zero_copy());
            check_all(s);
            o.ram_budget = 0;               // the minimum: a single expert
            ExpertStore s1(*f, expert_names(*f), o);
            check_all(s1);
            o.ram_budget = lay.total_bytes();   // everything
            o.policy = PolicyKind::lru;
            ExpertStore s2(*f, expert_names(*f), o);
            check_all(s2);
            check_all(s2);
            const auto t = s2.stats().total();
            CHECK(t.hits == t.uses / 2);   // the second pass hits everything
        }
    }
    SUBCASE("sim device") {
        for (ExpertIo io : {ExpertIo::mmap, ExpertIo::pread}) {
            const SimDeviceSpec spec{lay.max_expert_bytes() * 40, 50.0};
            SimDevice dev(spec), dev1(spec), dev2(spec);
            ExpertStoreOptions o;
            o.io = io;
            o.device = &dev;
            ExpertStore s(*f, expert_names(*f), o);
            check_all(s);
            const auto t = s.stats().total();
            CHECK(t.bytes_copied > 0);
            o.ram_budget = one_per_layer;
            o.device_budget = lay.max_expert_bytes();   // one slot
            o.device = &dev1;
            ExpertStore s1(*f, expert_names(*f), o);
            check_all(s1);
            o.cpu_gbps = 1000;   // a fast CPU: the cost model keeps misses on the host
            o.reuse = 1;
            o.device = &dev2;
            ExpertStore s2(*f, expert_names(*f), o);
            check_all(s2);
            CHECK(s2.stats().total().cpu_computed > 0);
            CHECK(s2.stats().total().bytes_copied == 0);
            // Without a host tier (mmap, no RAM budget) a miss copies from the mapping, through
            // staging buffers on a GPU: the cost model takes the staged rate. Fast pinned copies
            // but slow staged ones keep those misses on the CPU; from pread's host tier they copy.
            SimDeviceSpec staged = spec;
            staged.gbps = 1000;
            staged.staged_gbps = 1;
            SimDevice dev3(staged);
            ExpertStoreOptions o3;
            o3.io = io;
            o3.device = &dev3;
            o3.cpu_gbps = 50;
            o3.reuse = 1;
            ExpertStore s3(*f, expert_names(*f), o3);
            check_all(s3);
            INFO((io == ExpertIo::mmap ? "mmap" : "pread"));
            if (io == ExpertIo::mmap) {
                CHECK(s3.stats().total().cpu_computed > 0);
                CHECK(s3.stats().total().bytes_copied == 0);
            } else {
                CHECK(s3.stats().total().cpu_computed == 0);
                CHECK(s3.stats().total().bytes_copied > 0);
            }
        }
    }
}

TEST_CASE("placement: an -ot rule names a layer's experts by the layer's expert tensor names") {
    const std::array<std::string, 3> l3 = {"blk.3.ffn_gate_exps.weight", "blk.3.ffn_up_exps.weight", "blk.3.ffn_down_exps.weight"};
    const std::array<std::string, 3> l13 = {"blk.13.ffn_gate_exps.weight", "blk.13.ffn_up_exps.weight", "blk.13.ffn_down_exps.weight"};
    const std::array<std::string, 3> dense = {"", "", ""};
    const std::regex down3("blk\\.3\\.ffn_down_exps"), any3("blk\\.3\\."), exps("_exps"), embd("token_embd");
    CHECK(names_experts(down3, l3));
    CHECK_FALSE(names_experts(down3, l13));
    CHECK(names_experts(any3, l3));
    CHECK_FALSE(names_experts(any3, l13));
    CHECK(names_experts(exps, l13));
    CHECK_FALSE(names_experts(embd, l3));
    CHECK_FALSE(names_experts(std::regex(""), dense));   // a layer without experts matches nothing
    // resolve_placement takes the same test: only layer 3 moves, a dense layer stays unplaced.
    PlacementRules r;
    r.add_override("blk\\.3\\.ffn_down_exps=CPU");
    const auto p = resolve_placement(r, ExpertTensorNames{dense, l3, l13}, "sim0");
    CHECK(p[0] == Placement::cached);
    CHECK(p[1] == Placement::cpu);
    CHECK(p[2] == Placement::cached);
}

TEST_CASE("store: static placement (--cpu-moe, --n-cpu-moe, -ot)") {
    auto f = gguf::File::open(kModel);
    const int nl = n_layer_of(*f);
    const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
    const SimDeviceSpec spec{lay.max_expert_bytes() * size_t(lay.n_expert) * size_t(nl + 1), 100.0};
    SimDevice dev(spec), dev2(spec), dev3(spec), dev4(spec);
    ExpertStoreOptions o;
    o.device = &dev;
    o.placement.n_cpu_moe = 4;
    ExpertStore s(*f, expert_names(*f), o);
    check_all(s);
    for (int l = 1; l < nl; ++l) {
        ExpertRef r = s.acquire(l, 7);
        CHECK_MESSAGE(r.tier == (l < 4 ? Tier::mapped : Tier::device), "layer " << l);
        s.release(r);
    }
    CHECK(s.stats().total().bytes_copied == 0);   // placed at start, nothing paged later

    ExpertStoreOptions o2;
    o2.device = &dev2;
    o2.placement.add_override("blk\\.(2|3)\\.ffn_.*_exps=sim0");
    o2.placement.add_override("blk\\.[0-9]+\\.ffn_.*_exps=CPU");
    ExpertStore s2(*f, expert_names(*f), o2);
    check_all(s2);
    auto r2 = s2.acquire(2, 0), r5 = s2.acquire(5, 0);
    CHECK(r2.tier == Tier::device);
    CHECK(r5.tier == Tier::mapped);
    s2.release(r2), s2.release(r5);

    ExpertStoreOptions o3;
    o3.device = &dev3;
    o3.placement.cpu_moe = true;
    ExpertStore s3(*f, expert_names(*f), o3);
    auto r3 = s3.acquire(6, 1);
    CHECK(r3.tier == Tier::mapped);

    PlacementRules bad;
    CHECK_THROWS_WITH(bad.add_override("nonsense"), doctest::Contains("REGEX=DEVICE"));
    bad.add_override("blk=cuda7");
    ExpertStoreOptions o4;
    o4.device = &dev4;
    o4.placement = bad;
    CHECK_THROWS_WITH((void)ExpertStore(*f, expert_names(*f), o4), doctest::Contains("cuda7"));
    // A device too small for the placed layers says so.
    SimDevice small({lay.max_expert_bytes() * 8, 100.0});
    ExpertStoreOptions o5;
    o5.device = &small;
    o5.placement.n_cpu_moe = 1;
    CHECK_THROWS_WITH((void)ExpertStore(*f, expert_names(*f), o5), doctest::Contains("slots"));
}

TEST_CASE("store: hit counts follow LRU exactly, with and without a profile seed") {
    auto f = gguf::File::open(kModel);
    const int nl = n_layer_of(*f);
    const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
    const int layer = 2, E = lay.n_expert, K = 4;
    const size_t C = 8;
    // A skewed trace on one layer.
    std::mt19937 rng(42);
    std::vector<double> w;
    for (int i = 0; i < E; ++i) w.push_back(1.0 / (i + 1));
    std::discrete_distribution<int> d(w.begin(), w.end());
    std::vector<std::vector<int32_t>> trace;
    for (int t = 0; t < 400; ++t) {
        std::vector<int32_t> tok;
        while (int(tok.size()) < K) {
            const int e = d(rng);
            if (std::find(tok.begin(), tok.end(), e) == tok.end()) tok.push_back(e);
        }
        trace.push_back(tok);
    }
    // The naive model of what the store does per token: route() refreshes the resident experts
    // (in id order), then acquire() loads the misses in selection order, evicting the least
    // recently used non-pinned one.
    auto naive = [&](const std::set<int>& pinned) {
        std::map<int, long> last;
        for (int p : pinned) last[p] = 0;
        long seq = 0;
        uint64_t hits = 0;
        for (const auto& tok : trace) {
            std::vector<int> sorted(tok.begin(), tok.end());
            std::sort(sorted.begin(), sorted.end());
            std::vector<int> miss;
            for (int e : sorted) {
                if (last.count(e)) ++hits, last[e] = ++seq;
                else miss.push_back(e);
            }
            for (int e : tok) {
                if (std::find(miss.begin(), miss.end(), e) == miss.end()) continue;
                if (last.size() >= C) {
                    auto v = last.end();
                    for (auto it = last.begin(); it != last.end(); ++it)
                        if (!pinned.count(it->first) && (v == last.end() || it->second < v->second)) v = it;
                    last.erase(v);
                }
                last[e] = ++seq;
            }
        }
        return hits;
    };
    auto run = [&](const ExpertProfile* seed) {
        ExpertStoreOptions o;
        o.io = ExpertIo::pread;
        o.async = false;
        o.policy = PolicyKind::lru;
        o.ram_budget = C * lay.layers[size_t(layer)].bytes;
        o.seed = seed;
        o.seed_fraction = 0.5;
        ExpertStore s(*f, expert_names(*f), o);
        for (const auto& tok : trace) {
            s.route(layer, tok, 1);
            for (int32_t e : tok) {
                auto r = s.acquire(layer, e);
                CHECK(r.tier == Tier::host);
                s.release(r);
            }
        }
        return s.stats().layers[size_t(layer)];
    };
    const auto plain = run(nullptr);
    CHECK(plain.uses == trace.size() * K);
    CHECK(plain.hits == naive({}));

    ExpertProfile prof(nl, E);
    for (const auto& tok : trace)
        for (int e : tok) prof.add(layer, e);
    std::vector<std::pair<uint64_t, int>> order;
    for (int e = 0; e < E; ++e) order.push_back({prof.get(layer, e), -e});
    std::sort(order.rbegin(), order.rend());   // hottest first, ties to the lower id
    std::set<int> pinned;
    for (size_t i = 0; i < C / 2; ++i) pinned.insert(-order[i].second);
    const auto seeded = run(&prof);
    CHECK(seeded.hits == naive(pinned));
    CHECK(seeded.hits > plain.hits);
}

TEST_CASE("store: concurrent requests for one expert load it once") {
    auto f = gguf::File::open(kModel);
    for (bool async : {false, true}) {
        CAPTURE(async);
        ExpertStoreOptions o;
        o.io = ExpertIo::pread;
        o.async = async;
        o.ram_budget = size_t(64) << 20;
        ExpertStore s(*f, expert_names(*f), o);
        std::mutex m;
        std::map<std::pair<int, int>, int> loads;
        s.reader().before_read = [&](int l, int e) {
            {
                std::lock_guard lk(m);
                ++loads[{l, e}];
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(30));   // keep it in flight
        };
        const std::vector<int32_t> sel{3, 9, 10, 11};
        s.route(4, sel, 1);
        std::atomic<int> ok{0};
        std::vector<std::thread> th;
        for (int i = 0; i < 8; ++i)
            th.emplace_back([&, i] {
                const int e = sel[size_t(i) % sel.size()];
                ExpertRef r = s.acquire(4, e);
                if (same_bytes(s, r)) ++ok;
                s.release(r);
            });
        for (auto& t : th) t.join();
        CHECK(ok == 8);
        CHECK(loads.size() == 4);
        for (const auto& kv : loads)   // not a structured binding: clang 14 cannot capture one (doctest's lambda)
            CHECK_MESSAGE(kv.second == 1, "expert " << kv.first.second << " read " << kv.second << " times");
        CHECK(s.reader().experts_read() == 4);
        if (async) CHECK(s.reader().reads() < 4 * 3);   // 9, 10, 11 are adjacent: batched
    }
}

TEST_CASE("store: O_DIRECT is active on the build directory, and reads the file's exact bytes") {
    const std::string dir = direct_io_dir();
    if (dir.empty()) return;
    const auto path = dir + "/direct.gguf";
    std::filesystem::copy_file(kModel, path, std::filesystem::copy_options::overwrite_existing);
    {
        auto f = gguf::File::open(path);
        for (bool async : {false, true}) {
            CAPTURE(async);
            ExpertStoreOptions o;
            o.io = ExpertIo::direct;
            o.async = async;
            o.ram_budget = 0;   // a single expert: every acquire reads
            ExpertStore s(*f, expert_names(*f), o);
            REQUIRE(s.reader().io() == ExpertIo::direct);
            CHECK(s.reader().direct_active());
            check_all(s);
            CHECK(s.reader().experts_read() > 0);
        }
    }
    std::filesystem::remove(path);
}

TEST_CASE("store: truncated expert data fails with layer, expert and offset") {
    // In the build directory, so that the direct reads go through O_DIRECT and its aligned
    // bounce buffer (the temp directory may be a tmpfs, where they fall back to buffered reads).
    std::string d = direct_io_dir();
    const bool direct_ok = !d.empty();
    if (d.empty()) d = (std::filesystem::temp_directory_path() / "kinfer_es_trunc").string();
    const auto dir = std::filesystem::path(d);
    std::filesystem::create_directories(dir);
    const auto path = (dir / "m.gguf").string();
    std::filesystem::copy_file(kModel, path, std::filesystem::copy_options::overwrite_existing);
    {
        auto f = gguf::File::open(path);
        const int nl = n_layer_of(*f);
        const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
        // Cut the file inside expert 20's down slice of the last layer.
        const int L = nl - 1, E = 20;
        const uint64_t cut = lay.file_offset(*f, L, 2, E) + 100;
        for (ExpertIo io : {ExpertIo::pread, ExpertIo::direct})
            for (bool async : {false, true}) {
                CAPTURE(expert_io_name(io));
                ExpertStoreOptions o;
                o.io = io;
                o.async = async;
                o.ram_budget = size_t(16) << 20;
                ExpertStore s(*f, expert_names(*f), o);
                if (io == ExpertIo::direct && direct_ok) CHECK(s.reader().direct_active());
                std::filesystem::resize_file(path, cut);
                const std::vector<int32_t> sel{E, E + 1};
                s.route(L, sel, 1);
                try {
                    s.acquire(L, E);
                    FAIL("no error");
                } catch (const Error& e) {
                    const std::string msg = e.what();
                    CHECK_MESSAGE(msg.find(fmt::format("layer {} expert {}", L, E)) != std::string::npos, msg);
                    CHECK_MESSAGE(msg.find("offset") != std::string::npos, msg);
                    CHECK_MESSAGE(msg.find("end of file") != std::string::npos, msg);
                }
                const std::string want = fmt::format("expert {}", E + 1);
                CHECK_THROWS_WITH(s.acquire(L, E + 1), doctest::Contains(want.c_str()));
                // The store is still usable for data before the cut.
                ExpertRef r = s.acquire(1, 0);
                CHECK(same_bytes(s, r));
                s.release(r);
                std::filesystem::copy_file(kModel, path, std::filesystem::copy_options::overwrite_existing);
            }
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("sim device: memory pool, ordered copies, bandwidth") {
    CHECK(parse_sim_device("sim:1GiB").bytes == size_t(1) << 30);
    CHECK(parse_sim_device("sim:512M,12.5").gbps == 12.5);
    CHECK_THROWS_WITH(parse_sim_device("cuda:0"), doctest::Contains("sim:SIZE"));
    CHECK_THROWS_WITH(parse_sim_device("sim:1G,fast"), doctest::Contains("fast"));

    SimDevice dev({1 << 20, 1.0});   // 1 MiB at 1 GB/s
    auto a = dev.alloc(300 * 1024), b = dev.alloc(300 * 1024), c = dev.alloc(300 * 1024);
    CHECK(a.valid());
    CHECK(b.valid());
    CHECK(c.valid());
    CHECK(!dev.alloc(300 * 1024).valid());
    dev.free(b);
    dev.free(a);
    auto big = dev.alloc(600 * 1024);   // a and b merged
    CHECK(big.valid());
    std::vector<uint8_t> src(600 * 1024);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7);
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t t1 = dev.copy_async(big, 0, src.data(), 300 * 1024);
    const uint64_t t2 = dev.copy_async(big, 300 * 1024, src.data() + 300 * 1024, 300 * 1024);
    dev.wait(t2);
    CHECK(dev.done(t1));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(secs >= 600 * 1024 / 1e9);   // 0.6 ms at 1 GB/s
    CHECK(std::memcmp(dev.data(big), src.data(), src.size()) == 0);
    CHECK(dev.bytes_copied() == 600 * 1024);
    CHECK_THROWS(dev.copy_async(c, 1, src.data(), 300 * 1024));
}

TEST_CASE("store: device misses stall, prefetch hides them") {
    auto f = gguf::File::open(kModel);
    const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
    // Each copy takes ~50 ms: acquire() comes back long before the two copies of layer 3 land
    // (100 ms), with room for a busy machine to preempt the test thread.
    const double gbps = double(lay.max_expert_bytes()) / 0.05 / 1e9;
    SimDevice dev({lay.max_expert_bytes() * 64, gbps});
    ExpertStoreOptions o;
    o.device = &dev;
    o.policy = PolicyKind::lru;
    ExpertStore s(*f, expert_names(*f), o);
    const std::vector<int32_t> sel{1, 2};
    s.route(3, sel, 1);
    std::vector<ExpertRef> refs;
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t e : sel) refs.push_back(s.acquire(3, e));
    const double acquire_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(acquire_s < 0.05);   // the host thread did not wait for the copies (they need 100 ms)
    for (const auto& r : refs) {
        CHECK(r.tier == Tier::device);
        CHECK(r.ready != 0);   // the copy ticket the compute stream waits for
        CHECK(same_bytes(s, r));   // waits for it on the host, counted as stall
        s.release(r);
    }
    auto st = s.stats().layers[3];
    CHECK(st.stall_ns > 0);
    CHECK(st.hits == 0);
    const std::vector<int32_t> next{5, 6};
    s.prefetch(4, next);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    s.route(4, next, 1);
    for (int32_t e : next) {
        auto r = s.acquire(4, e);
        CHECK(r.ready == 0);   // landed while we slept: nothing to wait for
        CHECK(same_bytes(s, r));
        s.release(r);
    }
    st = s.stats().layers[4];
    CHECK(st.prefetched == 2);
    CHECK(st.prefetch_used == 2);
    CHECK(st.hits == 2);
    CHECK(st.stall_ns == 0);
    const std::string rep = s.report();
    CHECK(rep.find("hit rate") != std::string::npos);
    CHECK(rep.find("hottest") != std::string::npos);
}

TEST_CASE("store: with a device tier the host tier is the device's pinned memory; all of it is given back") {
    auto f = gguf::File::open(kModel);
    const auto lay = ExpertLayout::from_file(*f, expert_names(*f));
    size_t one_per_layer = 0;
    for (const auto& L : lay.layers) one_per_layer += L.bytes;
    SimDevice dev({lay.max_expert_bytes() * 8, 50.0});
    {
        ExpertStoreOptions o;
        o.io = ExpertIo::pread;   // every expert comes through a host buffer
        o.ram_budget = one_per_layer;
        o.device = &dev;
        ExpertStore s(*f, expert_names(*f), o);
        check_all(s);
        CHECK(s.stats().total().bytes_copied > 0);
        CHECK(dev.pinned_bytes() > 0);
        CHECK(dev.pageable_copies() == 0);   // no copy was staged by a driver
    }
    CHECK(dev.pinned_bytes() == 0);
    // Without a host tier the copies come from the mapping: pageable, and counted as such.
    {
        ExpertStoreOptions o;
        o.device = &dev;
        ExpertStore s(*f, expert_names(*f), o);
        check_all(s);
    }
    CHECK(dev.pageable_copies() > 0);
    // Without a device the host tier is plain memory: the device's allocator is not asked.
    ExpertStoreOptions o;
    o.io = ExpertIo::pread;
    ExpertStore s(*f, expert_names(*f), o);
    check_all(s);
    CHECK(dev.pinned_bytes() == 0);
}

// Routing profiles: file round trip, malformed files, and the summary statistics.
#include "test_util.h"

#include "runtime/device.h"
#include "runtime/expert_profile.h"

#include <cmath>
#include <filesystem>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

using namespace kinfer::runtime;

TEST_CASE("profile: save, load, merge") {
    ExpertProfile p(3, 4);
    p.add(1, 0, 5);
    p.add(1, 3, 2);
    p.add(2, 2, 7);
    const auto path = (std::filesystem::temp_directory_path() / "kinfer_es_profile.txt").string();
    p.save(path);
    auto q = ExpertProfile::load(path);
    CHECK(q.n_layer == 3);
    CHECK(q.n_expert == 4);
    CHECK(q.counts == p.counts);
    q.merge(p);
    CHECK(q.get(2, 2) == 14);
    CHECK(q.total() == 28);
    CHECK_THROWS_WITH(q.merge(ExpertProfile(2, 4)), doctest::Contains("does not match"));
    std::filesystem::remove(path);
}

TEST_CASE("profile: malformed files name the file and line") {
    const auto path = (std::filesystem::temp_directory_path() / "kinfer_es_bad.txt").string();
    auto write = [&](const std::string& s) { std::ofstream(path) << s; };
    write("hello\n");
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("line 1"));
    write("kinfer-expert-profile 1\nlayers 2 experts x\n");
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("line 2"));
    write("kinfer-expert-profile 1\nlayers 2 experts 3\n1 1 2\n");
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("line 3"));
    write("kinfer-expert-profile 1\nlayers 2 experts 3\n5 1 2 3\n");
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("bad layer"));
    CHECK_THROWS_WITH(ExpertProfile::load(path + ".none"), doctest::Contains("cannot open"));
    std::filesystem::remove(path);
}

TEST_CASE("profile: counts past 2^64 and tables past 2^24 counts are refused; a layer is saved whatever its sum") {
    // Found by fuzz_expert_profile: a layer whose counts wrapped to a zero sum was dropped by
    // save() (the round trip lost it) and skipped by summarize().
    const auto path = (std::filesystem::temp_directory_path() / "kinfer_es_overflow.txt").string();
    std::ofstream(path) << "kinfer-expert-profile 1\nlayers 1 experts 2\n0 18446744073709551615 1\n";
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("line 3: the counts add up past 2^64"));
    std::ofstream(path) << "kinfer-expert-profile 1\nlayers 2 experts 2\n0 18446744073709551615 0\n1 0 1\n";
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("line 4"));
    // Also found by it: the header alone sized the count table (80123 x 3249 x 8 bytes = 2 GB
    // from a 250-byte file; the limits allowed 800 GB).
    std::ofstream(path) << "kinfer-expert-profile 1\nlayers 80123 experts 3249\n0 1\n";
    CHECK_THROWS_WITH(ExpertProfile::load(path), doctest::Contains("more than 2^24 counts"));
    ExpertProfile p(2, 2);
    p.add(1, 0, UINT64_MAX);
    p.add(1, 1, 1);   // wraps in memory (merging counts in a long run): still saved and read back
    p.save(path);
    std::ifstream f(path);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK(text.find("\n1 18446744073709551615 1\n") != std::string::npos);
    std::filesystem::remove(path);
}

TEST_CASE("profile: summary statistics") {
    // One layer, 20 experts: expert 0 takes 60, expert 1 takes 20, 18 experts take 1 each.
    ExpertProfile p(2, 20);
    p.add(1, 0, 60);
    p.add(1, 1, 20);
    for (int e = 2; e < 20; ++e) p.add(1, e, 1);
    const auto s = summarize(p, 3);
    CHECK(s.total == 98);
    CHECK(s.n_routed_layers == 1);   // layer 0 has no routing (dense)
    // Units of routed layers only (layer 0 has none): top 10 % of 20 = 2 units, 60 + 20.
    CHECK(s.top10_share == doctest::Approx(80.0 / 98.0));
    REQUIRE(s.layers.size() == 1);
    CHECK(s.layers[0].top10_share == doctest::Approx(80.0 / 98.0));   // 2 of 20
    CHECK(s.layers[0].unused == 0);
    REQUIRE(s.hottest.size() == 3);
    CHECK(s.hottest[0].expert == 0);
    CHECK(s.hottest[1].expert == 1);
    CHECK(s.hottest[2].expert == 2);
    CHECK(s.max_over_mean == doctest::Approx(60.0 / (98.0 / 20.0)));
    // Gini as the mean absolute difference over twice the mean.
    std::vector<double> x{60, 20};
    for (int e = 2; e < 20; ++e) x.push_back(1);
    double mad = 0;
    for (double a : x)
        for (double b : x) mad += std::fabs(a - b);
    CHECK(s.gini == doctest::Approx(mad / (2.0 * 20 * 20 * (98.0 / 20))));
    const std::string txt = format_summary(s);
    CHECK(txt.find("top-10% share 81.6%") != std::string::npos);
    // Uniform traffic: no skew.
    ExpertProfile u(1, 10);
    for (int e = 0; e < 10; ++e) u.add(0, e, 5);
    CHECK(summarize(u).gini == doctest::Approx(0.0));
    CHECK(summarize(u).layers[0].eff_experts == doctest::Approx(10.0));
}

TEST_CASE("sizes parse like the flags take them") {
    CHECK(parse_bytes("100") == 100);
    CHECK(parse_bytes("4KiB") == 4096);
    CHECK(parse_bytes("1.5G") == size_t(1.5 * 1024 * 1024 * 1024));
    CHECK(parse_bytes("60GiB") == size_t(60) << 30);
    CHECK_THROWS_WITH(parse_bytes("12 apples"), doctest::Contains("unit"));
    CHECK_THROWS(parse_bytes("lots"));
}

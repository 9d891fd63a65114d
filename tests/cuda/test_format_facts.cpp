// The format facts the kernels share with the CPU (quant/blocks.h, type_facts.h): the device-side
// code book lookups equal the CPU arrays, and the facts table agrees with the CPU trait table.
#include "quant/blocks.h"
#include "quant/type_facts.h"
#include "quant/types.h"

#include <doctest/doctest.h>

#include <cstring>

using namespace kinfer::quant;

TEST_CASE("format facts: the packed code book lookups equal the CPU arrays for every code") {
    for (int q = 0; q < 16; ++q) {
        INFO("code ", q);
        CHECK(iq4nl_level(q) == kvalues_iq4nl[q]);
        CHECK(mxfp4_level(q) == kvalues_mxfp4[q]);
    }
}

TEST_CASE("format facts: type_facts() is what the CPU trait table carries, for every id") {
    for (uint32_t id = 0; id < 64; ++id) {
        const TypeFacts f = type_facts(Type(id));
        const Traits* t = traits_or_null(id);
        INFO("id ", id);
        REQUIRE((f.name != nullptr) == (t != nullptr));
        if (!t) continue;
        CHECK(std::strcmp(f.name, t->name) == 0);
        CHECK(f.block_size == t->block_size);
        CHECK(f.type_size == t->type_size);
        CHECK(f.quantized == t->quantized);
        CHECK(f.vec_dot_type == t->vec_dot_type);
        CHECK(row_bytes(Type(id), 256 * f.block_size) == row_size(*t, 256 * f.block_size));
    }
}

// device_memory.h: the registry of device ranges the CPU backend refuses and CudaBackend::owns
// answers from. Arenas and allocations both; overlap (device_owning) against containment
// (device_containing) at the edges; removal one by one and by device.
#include "backend/device_memory.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace kinfer::backend;

TEST_CASE("device_memory: allocations are found by overlap and by containment, and go when unregistered") {
    // Address ranges only: nothing is read through them. Two devices' allocations side by side,
    // with a gap, inside a host buffer so the addresses are real and unused by anyone else.
    std::vector<uint8_t> space(4096);
    uint8_t* base = space.data();
    static const char dev_a[] = "test-a", dev_b[] = "test-b";
    register_device_allocation(dev_a, base, 100);          // [0, 100)
    register_device_allocation(dev_a, base + 100, 50);     // [100, 150): adjacent
    register_device_allocation(dev_b, base + 200, 100);    // [200, 300), after a gap

    CHECK(device_owning(base, 1) == dev_a);
    CHECK(device_owning(base + 99, 1) == dev_a);
    CHECK(device_owning(base + 149, 1) == dev_a);
    CHECK(device_owning(base + 150, 50) == nullptr);     // the gap exactly
    CHECK(device_owning(base + 150, 51) == dev_b);       // reaches the next one's first byte
    CHECK(device_owning(base + 120, 500) == dev_b);      // spans several: the last one starting inside
    CHECK(device_owning(base + 300, 10) == nullptr);
    CHECK(device_owning(base - 10, 10) == nullptr);      // ends where the first begins
    CHECK(device_owning(base - 10, 11) == dev_a);

    CHECK(device_containing(base, 100) == dev_a);
    CHECK(device_containing(base + 10, 90) == dev_a);
    CHECK(device_containing(base + 10, 91) == nullptr);  // runs into the adjacent allocation
    CHECK(device_containing(base + 100, 50) == dev_a);
    CHECK(device_containing(base + 160, 4) == nullptr);  // in the gap
    CHECK(device_containing(base + 250, 50) == dev_b);
    CHECK(device_containing(base + 250, 51) == nullptr);
    CHECK(device_containing(base - 1, 2) == nullptr);

    unregister_device_allocation(base + 100);
    CHECK(device_owning(base + 120, 10) == nullptr);
    CHECK(device_containing(base, 100) == dev_a);
    unregister_device_allocations(dev_a);                // what a backend's destructor does
    CHECK(device_owning(base, 150) == nullptr);
    CHECK(device_owning(base + 200, 1) == dev_b);
    unregister_device_allocation(base + 200);
    CHECK(device_owning(base, 4096) == nullptr);
    CHECK(device_containing(base + 200, 1) == nullptr);
}

TEST_CASE("device_memory: an arena and allocations together") {
    std::vector<uint8_t> arena(1024), other(64);
    static const char sim[] = "test-sim", gpu[] = "test-gpu";
    register_device_memory(sim, arena.data(), arena.size());
    register_device_allocation(gpu, other.data(), other.size());
    CHECK(device_owning(arena.data() + 512, 8) == sim);
    CHECK(device_owning(other.data() + 8, 8) == gpu);
    CHECK(device_containing(arena.data(), 8) == nullptr);   // arenas answer their backend's own owns()
    unregister_device_memory(arena.data());
    unregister_device_allocation(other.data());
    CHECK(device_owning(arena.data(), 1) == nullptr);
    CHECK(device_owning(other.data(), 1) == nullptr);
}

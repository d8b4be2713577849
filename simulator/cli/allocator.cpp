// The sluice binary's allocator settings. With jemalloc linked (simulator/CMakeLists.txt,
// SLUICE_JEMALLOC), its heap is backed by transparent huge pages (where the kernel's THP mode
// is `madvise` or `always`; `thp` needs jemalloc 5.1 or later, Debian 12 has 5.3): large worlds (a million
// flows, a 16k-GPU iteration) touch hundreds of MiB of flow heaps and records at random, and
// 2 MiB pages take most of the TLB misses and page faults out of that. jemalloc reads this
// string at its first allocation (its documented `malloc_conf` symbol); MALLOC_CONF in the
// environment still overrides it. Without jemalloc this file defines nothing.
#ifdef SLUICE_HAVE_JEMALLOC
extern "C" {
// NOLINTNEXTLINE: the name and type jemalloc looks up.
const char* malloc_conf = "thp:always,metadata_thp:auto";
}
#endif

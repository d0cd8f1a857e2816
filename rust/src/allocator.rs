//! The global allocator: mimalloc, built without transparent huge pages.
//!
//! Transcript loads and flushes allocate many short-lived strings; mimalloc
//! keeps that churn out of glibc's arena locks. By default it also asks the
//! kernel (`madvise(MADV_HUGEPAGE)`) to back its arenas with 2 MiB pages, and
//! every 2 MiB region a thread's heap first touches is then zeroed whole:
//! with one heap per thread, 50 conversations flushing from 50 threads spent
//! ~0.45 s of a ~1 s run in the kernel zeroing pages (the `no_thp` feature in
//! Cargo.toml; CHANGELOG.md has the figures). The process's own THP setting
//! is left alone: memory that is not ours keeps whatever the host chose.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The `VmFlags` of the mapping of this process that holds `addr`.
    fn vm_flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((start, end)) = head.split_once('-') {
                if let (Ok(start), Ok(end)) = (
                    usize::from_str_radix(start, 16),
                    usize::from_str_radix(end, 16),
                ) {
                    inside = (start..end).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.trim().to_owned();
                }
            }
        }
        panic!("no mapping of this process holds {addr:#x}");
    }

    #[test]
    fn heap_memory_is_not_advised_to_use_huge_pages() {
        let small = Box::new([7u8; 64]);
        let flags = vm_flags_at(small.as_ptr() as usize);
        assert!(
            !flags.split_whitespace().any(|f| f == "hg"),
            "mimalloc advised its arena to use transparent huge pages (VmFlags: {flags}): \
             build it with the `no_thp` feature"
        );
    }
}

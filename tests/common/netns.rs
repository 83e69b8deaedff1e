//! A network namespace of the test's own, as a pod or an awsvpc task has one: the
//! drain's quiet rule reads the namespace's passive-open counter, which on the host's
//! namespace every other test (and the machine) moves.

/// Runs `scene` on a thread of its own in a new network namespace with its loopback
/// up. Everything `scene` starts — lifeguard, the app, HAProxy, client threads —
/// inherits that namespace (a new process or thread gets its creator's); the test's
/// other threads stay where they were. The namespace ends with its last member.
pub fn in_own_netns<T: Send>(scene: impl FnOnce() -> T + Send) -> T {
    super::require_root();
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare with CLONE_NEWNET only moves the calling thread (a network
            // namespace may differ between the threads of one process).
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "THIS TEST CANNOT RUN: unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            let up = std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
                .expect("THIS TEST CANNOT RUN: no `ip` (iproute2)");
            assert!(
                up.success(),
                "THIS TEST CANNOT RUN: ip link set lo up failed"
            );
            scene()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

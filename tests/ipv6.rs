//! IPv6-only pods (EKS in IPv6 mode and any IPv6-only cluster: the pod has an IPv6
//! address alone, and the kubelet probes it): the default endpoint and the ready port
//! are dual-stack (`[::]` with IPV6_V6ONLY off), so they answer on both families. Each
//! test runs in a network namespace of its own; the IPv6-only one has `::1` alone on
//! its loopback (127.0.0.1 removed), as such a pod reaches itself.
mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::netns::in_own_netns;
use common::*;

/// GET `path` on `addr`: (status, body), or the error.
fn get_at(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    request_at(addr, "GET", path)
}

fn connects(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok()
}

fn v6(port: u16) -> SocketAddr {
    SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
}

fn v4(port: u16) -> SocketAddr {
    SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port))
}

/// lifeguard as PID 1 with the default --listen (the harness turns the endpoint off
/// unless told).
/// No drain delay: a stop here has no balancer to wait for.
fn start_on_the_default_listen(flags: &[&str]) -> Run {
    let flags: Vec<&str> = ["--drain-delay", "0"]
        .iter()
        .chain(flags)
        .copied()
        .collect();
    start_with(Mode::Pid1, &args(&flags, &[]), |c| {
        c.env_remove("LIFEGUARD_LISTEN");
    })
}

/// Removes 127.0.0.1 from this namespace's loopback: IPv6 alone, as an IPv6-only pod.
fn ipv6_only() {
    let done = std::process::Command::new("ip")
        .args(["addr", "del", "127.0.0.1/8", "dev", "lo"])
        .status()
        .expect("THIS TEST CANNOT RUN: no `ip` (iproute2)");
    assert!(
        done.success(),
        "THIS TEST CANNOT RUN: ip addr del 127.0.0.1/8 dev lo failed"
    );
    assert!(!connects(v4(9)), "127.0.0.1 still answers");
    assert!(
        std::net::TcpListener::bind("[::1]:0").is_ok(),
        "THIS TEST CANNOT RUN: no IPv6 loopback in a new network namespace"
    );
}

#[test]
fn in_an_ipv6_only_pod_the_default_endpoint_the_ready_port_and_the_probe_answer() {
    in_own_netns(|| {
        ipv6_only();
        let mut run = start_on_the_default_listen(&["-v", "--ready-port", "9596"]);
        run.ready();
        wait_until("/readyz on [::1]:9595 to answer ready", || {
            (get_at(v6(9595), "/readyz").ok()? == (200, "ready".to_string())).then_some(())
        });
        wait_until("the ready port on [::1]:9596", || {
            connects(v6(9596)).then_some(())
        });
        assert_eq!(get_at(v6(9595), "/livez").unwrap(), (200, "alive".into()));
        // The HEALTHCHECK client with the same settings: 127.0.0.1 is gone, ::1 answers.
        let probe = lifeguard().args(["--probe", "ready"]).output().unwrap();
        assert!(
            probe.status.success(),
            "--probe in an IPv6-only namespace: {:?} {}",
            probe.status,
            String::from_utf8_lossy(&probe.stderr)
        );
        run.signal(libc::SIGTERM);
        run.expect_exit(0);
    });
}

#[test]
fn the_default_endpoint_and_a_ready_port_with_listen_off_answer_on_both_families() {
    in_own_netns(|| {
        let mut run = start_on_the_default_listen(&["-v", "--ready-port", "9596"]);
        run.ready();
        for addr in [v4(9595), v6(9595)] {
            wait_until(&format!("/readyz on {addr}"), || {
                (get_at(addr, "/readyz").ok()?.0 == 200).then_some(())
            });
        }
        run.signal(libc::SIGTERM);
        run.expect_exit(0);

        // --listen off: the ready port keeps the default's host, dual-stack too.
        let mut run = start(
            Mode::Pid1,
            &args(
                &[
                    "-v",
                    "--drain-delay",
                    "0",
                    "--listen",
                    "off",
                    "--ready-port",
                    "9597",
                ],
                &[],
            ),
        );
        run.ready();
        for addr in [v4(9597), v6(9597)] {
            wait_until(&format!("the ready port on {addr}"), || {
                connects(addr).then_some(())
            });
        }
        run.signal(libc::SIGTERM);
        run.expect_exit(0);
    });
}

#[test]
fn an_explicit_ipv4_address_stays_ipv4_alone() {
    // A named address is taken as written: 0.0.0.0 does not answer on ::1.
    in_own_netns(|| {
        let flags = ["-v", "--drain-delay", "0", "--listen", "0.0.0.0:9595"];
        let mut run = start(Mode::Pid1, &args(&flags, &[]));
        run.ready();
        wait_until("/livez on 127.0.0.1", || {
            (get_at(v4(9595), "/livez").ok()?.0 == 200).then_some(())
        });
        assert!(!connects(v6(9595)));
        run.signal(libc::SIGTERM);
        run.expect_exit(0);
    });
}

//! netprobe: the attacker's side of the issue 19 egress tests, as a tiny
//! static binary that runs in any sandbox image (the slim image has no
//! ping, no raw-socket tool, no compiler). The tests build it with
//! `rustc -C target-feature=+crt-static` (no crates: glibc only, no NSS
//! call) and run it inside a sandbox, or in a sandbox's network namespace
//! from the host with every capability. Each command prints one line: a
//! result, or `error: <what>: <errno text>`.
//!
//! Commands:
//! * `gw-ll IFACE GW4` — the gateway's IPv6 link-local address, derived
//!   from its MAC (ARP after one UDP datagram) the way the kernel derives it
//!   (EUI-64), as the report's attacker did.
//! * `syn6 IFACE PORT` — over `AF_PACKET`, a hand-built ICMPv6 echo to
//!   `ff02::1` finds the host on the link, then a hand-built IPv6 TCP SYN to
//!   PORT on it: `synack from <addr>` when the host answers, else `none (…)`.
//! * `ping6 IFACE` — ICMPv6 echo to `ff02::1` through an unprivileged ping
//!   socket; `reply <addr>…` or `none`.
//! * `tcp6 ADDR IFACE PORT` / `udp6 ADDR IFACE PORT` — ordinary sockets to a
//!   link-local address.
//! * `flood IP PORT N` — hold N connections to a proxy, then ask once more:
//!   `opened=<k> next=<status line>`.

#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpStream, UdpSocket};
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

unsafe extern "C" {
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const c_void, len: u32) -> c_int;
    fn sendto(fd: c_int, buf: *const c_void, len: usize, flags: c_int, addr: *const c_void, alen: u32) -> isize;
    fn recvfrom(fd: c_int, buf: *mut c_void, len: usize, flags: c_int, addr: *mut c_void, alen: *mut u32) -> isize;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: u32) -> c_int;
    fn close(fd: c_int) -> c_int;
}

const AF_INET6: c_int = 10;
const AF_PACKET: c_int = 17;
const SOCK_DGRAM: c_int = 2;
const SOCK_RAW: c_int = 3;
const IPPROTO_ICMPV6: c_int = 58;
const ETH_P_ALL: u16 = 0x0003;
const SOL_SOCKET: c_int = 1;
const SO_RCVTIMEO: c_int = 20;

fn fail(what: &str) -> ! {
    println!("error: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(0)
}

fn sysfs(iface: &str, file: &str) -> String {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{file}"))
        .unwrap_or_else(|_| fail(&format!("read {iface}/{file}")))
        .trim()
        .to_owned()
}

fn mac_of(text: &str) -> [u8; 6] {
    let mut mac = [0u8; 6];
    for (i, part) in text.split(':').take(6).enumerate() {
        mac[i] = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    mac
}

fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        u16::from_be_bytes([mac[0] ^ 2, mac[1]]),
        u16::from_be_bytes([mac[2], 0xff]),
        u16::from_be_bytes([0xfe, mac[3]]),
        u16::from_be_bytes([mac[4], mac[5]]),
    )
}

/// The gateway's MAC from the ARP table, after one datagram made the
/// kernel resolve it (ARP is allowed on a confined bridge).
fn gateway_mac(gw: Ipv4Addr) -> [u8; 6] {
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap_or_else(|_| fail("udp bind"));
    let _ = sock.send_to(b"x", (gw, 9));
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let table = std::fs::read_to_string("/proc/net/arp").unwrap_or_default();
        for line in table.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 3 && cols[0] == gw.to_string() && cols[3] != "00:00:00:00:00:00" {
                return mac_of(cols[3]);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("error: no ARP entry for {gw}");
    std::process::exit(0)
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        acc += u32::from(word);
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// An Ethernet + IPv6 frame around `payload` (next header `proto`), the
/// payload's checksum (at `check_at`) filled over the IPv6 pseudo-header.
fn frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    proto: u8,
    mut payload: Vec<u8>,
    check_at: usize,
) -> Vec<u8> {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, proto]);
    let check = fold(sum16(&payload, sum16(&pseudo, 0)));
    payload[check_at..check_at + 2].copy_from_slice(&check.to_be_bytes());
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.push(proto);
    f.push(255);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&payload);
    f
}

fn syn(sport: u16, dport: u16) -> Vec<u8> {
    let mut tcp = Vec::with_capacity(20);
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&dport.to_be_bytes());
    tcp.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    tcp.extend_from_slice(&0u32.to_be_bytes());
    tcp.push(5 << 4);
    tcp.push(0x02);
    tcp.extend_from_slice(&65535u16.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0]);
    tcp
}

fn timeout(fd: c_int, ms: i64) {
    let tv: [i64; 2] = [0, ms * 1000];
    // SAFETY: a valid socket and a `struct timeval` of two longs.
    unsafe { setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, tv.as_ptr().cast(), 16) };
}

/// A packet socket bound to one interface.
struct Raw {
    fd: c_int,
    sll: [u8; 20],
}

impl Raw {
    fn open(ifindex: i32) -> Self {
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe { socket(AF_PACKET, SOCK_RAW, c_int::from(ETH_P_ALL.to_be())) };
        if fd < 0 {
            fail("socket(AF_PACKET)");
        }
        // struct sockaddr_ll: family, protocol, ifindex, hatype, pkttype, halen, addr[8].
        let mut sll = [0u8; 20];
        sll[0..2].copy_from_slice(&(AF_PACKET as u16).to_ne_bytes());
        sll[2..4].copy_from_slice(&ETH_P_ALL.to_be().to_ne_bytes());
        sll[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        sll[11] = 6;
        // SAFETY: `sll` is a sockaddr_ll of the size passed.
        if unsafe { bind(fd, sll.as_ptr().cast(), 20) } < 0 {
            fail("bind(AF_PACKET)");
        }
        timeout(fd, 100);
        Self { fd, sll }
    }

    fn send(&self, frame: &[u8]) {
        // SAFETY: a bound packet socket, a frame buffer and its address.
        let n = unsafe { sendto(self.fd, frame.as_ptr().cast(), frame.len(), 0, self.sll.as_ptr().cast(), 20) };
        if n < 0 {
            fail("sendto(AF_PACKET)");
        }
    }

    /// Send `frame` every 500 ms until `want` accepts a received frame or
    /// `secs` pass.
    fn exchange<T>(&self, frame: &[u8], secs: u64, want: impl Fn(&[u8]) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut next_send = Instant::now();
        let mut buf = vec![0u8; 65536];
        while Instant::now() < deadline {
            if Instant::now() >= next_send {
                self.send(frame);
                next_send = Instant::now() + Duration::from_millis(500);
            }
            // SAFETY: a receive buffer of the length passed; no address wanted.
            let n = unsafe { recvfrom(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0, std::ptr::null_mut(), std::ptr::null_mut()) };
            if n >= 54 && buf[12..14] == [0x86, 0xdd] {
                if let Some(t) = want(&buf[..n as usize]) {
                    return Some(t);
                }
            }
        }
        None
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { close(self.fd) };
    }
}

/// Find the host on the link as the report's attacker did — a hand-built
/// ICMPv6 echo to `ff02::1` — then send it a hand-built TCP SYN.
fn syn6(iface: &str, port: u16) {
    let ifindex: i32 = sysfs(iface, "ifindex").parse().unwrap_or(0);
    let own = mac_of(&sysfs(iface, "address"));
    let src = link_local(own);
    let raw = Raw::open(ifindex);
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
    let echo = frame(own, [0x33, 0x33, 0, 0, 0, 1], src, all_nodes, 58, vec![128, 0, 0, 0, 0x49, 0x54, 0, 1], 2);
    let found = raw.exchange(&echo, 3, |f| {
        let is_reply = f[20] == 58 && f.len() > 54 && f[54] == 129 && f[6..12] != own;
        is_reply.then(|| {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&f[6..12]);
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&f[22..38]);
            (mac, Ipv6Addr::from(ip))
        })
    });
    let Some((mac, dst)) = found else {
        println!("none (no echo reply on the link)");
        return;
    };
    let sport = 40000 + (std::process::id() % 20000) as u16;
    let syn_frame = frame(own, mac, src, dst, 6, syn(sport, port), 16);
    let answered = raw.exchange(&syn_frame, 4, |f| {
        let synack = f.len() >= 74
            && f[20] == 6
            && f[22..38] == dst.octets()
            && f[54..56] == port.to_be_bytes()
            && f[56..58] == sport.to_be_bytes()
            && f[67] & 0x12 == 0x12;
        synack.then_some(())
    });
    match answered {
        Some(()) => println!("synack from {dst}"),
        None => println!("none (echo from {dst}, no syn-ack)"),
    }
}

fn ping6(iface: &str) {
    let ifindex: u32 = sysfs(iface, "ifindex").parse().unwrap_or(0);
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe { socket(AF_INET6, SOCK_DGRAM, IPPROTO_ICMPV6) };
    if fd < 0 {
        fail("socket(ICMPv6 ping)");
    }
    timeout(fd, 300);
    // struct sockaddr_in6: family, port, flowinfo, addr[16], scope_id.
    let mut sin6 = [0u8; 28];
    sin6[0..2].copy_from_slice(&(AF_INET6 as u16).to_ne_bytes());
    sin6[8..24].copy_from_slice(&"ff02::1".parse::<Ipv6Addr>().map(|a| a.octets()).unwrap_or([0; 16]));
    sin6[24..28].copy_from_slice(&ifindex.to_ne_bytes());
    let echo = [128u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'i', b't'];
    // SAFETY: a datagram socket, a message and a sockaddr_in6 of the size passed.
    if unsafe { sendto(fd, echo.as_ptr().cast(), echo.len(), 0, sin6.as_ptr().cast(), 28) } < 0 {
        fail("sendto(ff02::1)");
    }
    let mut replies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        let mut from = [0u8; 28];
        let mut len: u32 = 28;
        // SAFETY: buffers of the lengths passed.
        let n = unsafe { recvfrom(fd, buf.as_mut_ptr().cast(), buf.len(), 0, from.as_mut_ptr().cast(), &mut len) };
        if n > 0 && buf[0] == 129 {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&from[8..24]);
            replies.push(Ipv6Addr::from(octets).to_string());
        }
    }
    // SAFETY: our own descriptor.
    unsafe { close(fd) };
    if replies.is_empty() {
        println!("none");
    } else {
        println!("reply {}", replies.join(" "));
    }
}

fn v6(addr: &str, iface: &str, port: u16) -> SocketAddr {
    let ip: Ipv6Addr = addr.parse().unwrap_or_else(|_| fail("parse address"));
    let scope: u32 = sysfs(iface, "ifindex").parse().unwrap_or(0);
    SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope))
}

fn flood(ip: &str, port: u16, n: usize) {
    let addr: SocketAddr = format!("{ip}:{port}").parse().unwrap_or_else(|_| fail("parse address"));
    let mut held = Vec::new();
    for _ in 0..n {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    // Over the cap, the proxy answers a bounded number at a time and closes
    // the rest unanswered: ask until one answer comes (or 10 tries).
    let mut next = String::new();
    for _ in 0..10 {
        next = match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.write_all(b"CONNECT probe.invalid:443 HTTP/1.1\r\nHost: probe.invalid:443\r\n\r\n");
                let mut head = [0u8; 256];
                match s.read(&mut head) {
                    Ok(k) => String::from_utf8_lossy(&head[..k]).lines().next().unwrap_or("").to_owned(),
                    Err(e) => format!("read error {e}"),
                }
            }
            Err(e) => format!("connect error {e}"),
        };
        if next.starts_with("HTTP/") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("opened={} next={next}", held.len());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let num = |i: usize| arg(i).parse::<u16>().unwrap_or(0);
    let gw = || arg(3).parse::<Ipv4Addr>().unwrap_or_else(|_| fail("parse gateway"));
    match arg(1) {
        "gw-ll" => println!("{}", link_local(gateway_mac(gw()))),
        "syn6" => syn6(arg(2), num(3)),
        "ping6" => ping6(arg(2)),
        "tcp6" => match TcpStream::connect_timeout(&v6(arg(2), arg(3), num(4)), Duration::from_secs(3)) {
            Ok(_) => println!("connected"),
            Err(e) => println!("error: connect: {e}"),
        },
        "udp6" => match UdpSocket::bind("[::]:0").and_then(|s| s.send_to(b"iterion-udp6-probe", v6(arg(2), arg(3), num(4)))) {
            Ok(_) => println!("sent"),
            Err(e) => println!("error: send: {e}"),
        },
        "flood" => flood(arg(2), num(3), arg(4).parse().unwrap_or(0)),
        _ => println!("error: usage"),
    }
}

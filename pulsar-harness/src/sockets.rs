//! The sockets a process listens on, read from `/proc` (what `ss -ltnp` and
//! `ss -lunp` show for it).

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The transport of a [`ListeningSocket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    /// A TCP socket in the `LISTEN` state.
    Tcp,
    /// A bound, unconnected UDP socket.
    Udp,
}

/// A socket a process accepts connections or datagrams on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListeningSocket {
    /// TCP or UDP.
    pub transport: Transport,
    /// The local address it is bound to (`0.0.0.0` or `::` for every
    /// interface).
    pub addr: SocketAddr,
}

impl ListeningSocket {
    /// Whether it is bound to a loopback address only (`127.0.0.0/8` or
    /// `::1`).
    pub fn is_loopback(&self) -> bool {
        self.addr.ip().is_loopback()
    }
}

impl fmt::Display for ListeningSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let transport = match self.transport {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        };
        write!(f, "{transport} {}", self.addr)
    }
}

/// Every TCP socket in `LISTEN` and every unconnected UDP socket that process
/// `pid` holds, sorted. Empty when the process is gone.
pub fn listening_sockets(pid: u32) -> Vec<ListeningSocket> {
    let inodes = socket_inodes(pid);
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut found = BTreeSet::new();
    for (file, transport) in [
        ("tcp", Transport::Tcp),
        ("tcp6", Transport::Tcp),
        ("udp", Transport::Udp),
        ("udp6", Transport::Udp),
    ] {
        let Ok(table) = fs::read_to_string(format!("/proc/{pid}/net/{file}")) else {
            continue;
        };
        for line in table.lines().skip(1) {
            if let Some((addr, inode)) = parse_line(line, transport) {
                if inodes.contains(&inode) {
                    found.insert(ListeningSocket { transport, addr });
                }
            }
        }
    }
    found.into_iter().collect()
}

/// The inodes of the sockets among the process's open files.
fn socket_inodes(pid: u32) -> BTreeSet<u64> {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let target = fs::read_link(e.path()).ok()?;
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// One line of `/proc/net/{tcp,tcp6,udp,udp6}`: the local address and the
/// inode, when the socket listens (TCP state `0A`) or is an unconnected UDP
/// socket (state `07` with no remote port).
fn parse_line(line: &str, transport: Transport) -> Option<(SocketAddr, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, remote, state, inode) = (
        fields.get(1)?,
        fields.get(2)?,
        fields.get(3)?,
        fields.get(9)?,
    );
    let listening = match transport {
        Transport::Tcp => *state == "0A",
        Transport::Udp => *state == "07" && remote.ends_with(":0000"),
    };
    if !listening {
        return None;
    }
    Some((parse_addr(local)?, inode.parse().ok()?))
}

/// `0100007F:1F90` or a 32-digit IPv6 form: the kernel prints each 32-bit
/// word of the address as a number in the host's byte order.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, UdpSocket};

    #[test]
    fn finds_its_own_listeners() {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let found = listening_sockets(std::process::id());
        let ours = [
            ListeningSocket {
                transport: Transport::Tcp,
                addr: tcp.local_addr().unwrap(),
            },
            ListeningSocket {
                transport: Transport::Udp,
                addr: udp.local_addr().unwrap(),
            },
        ];
        for socket in ours {
            assert!(found.contains(&socket), "{socket} not in {found:?}");
            assert!(socket.is_loopback());
        }
    }

    #[test]
    fn a_wildcard_bind_is_not_loopback() {
        let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        let found = listening_sockets(std::process::id());
        let socket = found.iter().find(|s| s.addr.port() == port).unwrap();
        assert!(!socket.is_loopback());
        assert_eq!(socket.to_string(), format!("tcp 0.0.0.0:{port}"));
    }
}

//! The server's network policy (DESIGN §7, §10): what `http_request`, custom HTTP tools,
//! `slack_message` and MCP over HTTP may connect to when weir runs as a service.
//!
//! Loopback, private, shared (CGNAT), link-local (which holds the cloud metadata address
//! 169.254.169.254), unique-local, site-local, unspecified, multicast and reserved addresses
//! are refused unless `[network] allow` in `weir.toml` lists them (`"127.0.0.1:9000"`,
//! `"10.0.0.0/8"`, `"[fd00::1]:443"`, `"192.168.1.5"`). IPv4 written in decimal, octal or hex
//! is normalised by the URL parser before the check; IPv4-mapped, NAT64 and 6to4 IPv6
//! addresses are checked as the IPv4 address they carry.
//!
//! Three checks, so no path around one: the URL before each request (an IP literal as
//! written, a name by resolving it with the URL's port), the resolver of the HTTP client
//! (every address a connection is actually made to, after DNS resolution, redirects and
//! reconnections included), and the redirect policy (every hop's URL, as before the first
//! request). The resolver sees no port, so there a listed `ip:port` admits its address; the
//! URL checks hold the port.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use ipnet::IpNet;

/// One `[network] allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    net: IpNet,
    port: Option<u16>,
}

/// The policy: refuse internal addresses except the allowed ones.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    allow: Vec<Rule>,
}

/// Why an address was refused, worded for the step's error.
pub fn refusal(what: &str, addr: &str) -> String {
    format!(
        "network policy: {what} resolves to {addr}, an internal address (loopback, private, link-local, unique-local, metadata or reserved) that `weir serve` does not connect to; add it to [network] allow in weir.toml to permit it"
    )
}

impl Policy {
    /// Parses `[network] allow`; an entry that is none of `ip`, `ip:port`, `[v6]:port` or a
    /// CIDR block is an error naming it.
    pub fn new(allow: &[String]) -> Result<Self, String> {
        let mut rules = Vec::new();
        for entry in allow {
            rules.push(parse_rule(entry).ok_or_else(|| {
                format!(
                    "[network] allow: `{entry}` is not an address, address:port or CIDR block (e.g. \"127.0.0.1:9000\", \"10.0.0.0/8\")"
                )
            })?);
        }
        Ok(Self { allow: rules })
    }

    /// Whether connecting to `ip` (on `port`, when known) is permitted.
    pub fn permits(&self, ip: IpAddr, port: Option<u16>) -> bool {
        let ip = canonical(ip);
        !is_internal(ip)
            || self.allow.iter().any(|r| {
                r.net.contains(&ip) && (r.port.is_none() || port.is_none() || r.port == port)
            })
    }

    /// Checks a URL as a request would reach it: an IP literal directly, a name by
    /// resolving it (every address it resolves to must be permitted).
    pub async fn check_url(&self, url: &reqwest::Url) -> Result<(), String> {
        let port = url.port_or_known_default();
        match self.host(url, port)? {
            Some(name) => {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port.unwrap_or(0)))
                    .await
                    .map_err(|e| format!("cannot resolve {name}: {e}"))?
                    .collect();
                self.resolved(name, &addrs, port)
            }
            None => Ok(()),
        }
    }

    /// The same check without awaiting, for the redirect policy (which reqwest calls
    /// synchronously); a name is resolved with the system resolver.
    pub fn check_url_blocking(&self, url: &reqwest::Url) -> Result<(), String> {
        let port = url.port_or_known_default();
        match self.host(url, port)? {
            Some(name) => {
                let addrs: Vec<SocketAddr> = (name, port.unwrap_or(0))
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve {name}: {e}"))?
                    .collect();
                self.resolved(name, &addrs, port)
            }
            None => Ok(()),
        }
    }

    /// Checks an IP-literal host at once; returns a name host for resolving.
    fn host<'u>(
        &self,
        url: &'u reqwest::Url,
        port: Option<u16>,
    ) -> Result<Option<&'u str>, String> {
        match url.host() {
            None => Err(format!("network policy: {url} has no host")),
            Some(url::Host::Ipv4(ip)) => self.literal(IpAddr::V4(ip), port).map(|()| None),
            Some(url::Host::Ipv6(ip)) => self.literal(IpAddr::V6(ip), port).map(|()| None),
            Some(url::Host::Domain(name)) => Ok(Some(name)),
        }
    }

    fn literal(&self, ip: IpAddr, port: Option<u16>) -> Result<(), String> {
        if self.permits(ip, port) {
            Ok(())
        } else {
            Err(refusal("the URL", &display(ip, port)))
        }
    }

    fn resolved(&self, name: &str, addrs: &[SocketAddr], port: Option<u16>) -> Result<(), String> {
        if addrs.is_empty() {
            return Err(format!("cannot resolve {name}: no addresses"));
        }
        match addrs.iter().find(|a| !self.permits(a.ip(), port)) {
            Some(bad) => Err(refusal(name, &display(bad.ip(), port))),
            None => Ok(()),
        }
    }
}

fn display(ip: IpAddr, port: Option<u16>) -> String {
    match (ip, port) {
        (IpAddr::V6(v6), Some(p)) => format!("[{v6}]:{p}"),
        (ip, Some(p)) => format!("{ip}:{p}"),
        (ip, None) => ip.to_string(),
    }
}

fn parse_rule(entry: &str) -> Option<Rule> {
    let entry = entry.trim();
    if let Ok(net) = entry.parse::<IpNet>() {
        return Some(Rule { net, port: None });
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(Rule {
            net: IpNet::from(canonical(ip)),
            port: None,
        });
    }
    let sock: SocketAddr = entry.parse().ok()?;
    Some(Rule {
        net: IpNet::from(canonical(sock.ip())),
        port: Some(sock.port()),
    })
}

/// An IPv6 address that carries an IPv4 one (mapped, NAT64, 6to4) as that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    // IPv4-compatible (deprecated, ::a.b.c.d), but not :: and ::1 themselves.
    if s[..6] == [0; 6] && (s[6] != 0 || s[7] > 1) {
        return Some(tail());
    }
    // NAT64 well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail());
    }
    // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD.
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_unspecified()
                || o[0] == 0
                || v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10, shared (CGNAT)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // 192.0.0.0/24, protocol assignments
                || (o[0] == 198 && (o[1] & 0xfe) == 18) // 198.18.0.0/15, benchmarking
                || v4.is_multicast()
                || o[0] >= 240 // reserved and broadcast
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_unspecified()
                || v6.is_loopback()
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] & 0xfe00) == 0xfc00 // unique-local, fd00:ec2::254 metadata
                || v6.is_multicast()
        }
    }
}

/// The HTTP client's resolver under the policy: resolves with the system resolver and
/// refuses the connection when any address is not permitted.
pub(crate) struct Resolver(pub Arc<Policy>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| !policy.permits(a.ip(), None)) {
                return Err(refusal(&host, &bad.ip().to_string()).into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// A client whose every connection and redirect is under the policy (or a plain client).
pub(crate) fn client(policy: Option<&Arc<Policy>>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(10));
    let builder = match policy {
        None => builder,
        Some(p) => {
            let redirect = p.clone();
            builder
                .dns_resolver(Resolver(p.clone()))
                .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                    if attempt.previous().len() >= 10 {
                        return attempt.error("too many redirects (10)");
                    }
                    match redirect.check_url_blocking(attempt.url()) {
                        Ok(()) => attempt.follow(),
                        Err(e) => attempt.error(format!("redirect refused: {e}")),
                    }
                }))
        }
    };
    builder.build().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_match_with_ports() {
        let p = Policy::new(&[
            "127.0.0.1:9000".into(),
            "10.0.0.0/8".into(),
            "[::1]:80".into(),
        ])
        .unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(p.permits(lo, Some(9000)));
        assert!(!p.permits(lo, Some(9001)));
        assert!(p.permits("10.9.8.7".parse().unwrap(), Some(1)));
        assert!(p.permits("::1".parse().unwrap(), Some(80)));
        assert!(!p.permits("::ffff:127.0.0.2".parse().unwrap(), Some(9000)));
        assert!(p.permits("93.184.216.34".parse().unwrap(), Some(443)));
        assert!(Policy::new(&["localhost".into()]).is_err());
    }
}

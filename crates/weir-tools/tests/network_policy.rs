//! The server's network policy against SSRF payloads: every internal address, however it is
//! written, refused with an error naming the policy; the allowed address still reachable;
//! redirects from an allowed address to a refused one refused. A plain HTTP server on
//! loopback answers every request, so a payload the policy let through would succeed.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{Value, json};
use weir_core::settings::Settings;
use weir_core::{ToolCall, ToolRunner};

/// A loopback server: `/to?URL` redirects to URL, anything else answers 200 `reached`.
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                reader.read_line(&mut line).ok();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                let reply = match path.strip_prefix("/to?") {
                    Some(target) => format!(
                        "HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    ),
                    None => {
                        "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached"
                            .to_string()
                    }
                };
                stream.write_all(reply.as_bytes()).ok();
            });
        }
    });
    port
}

fn registry(allow: &[String]) -> weir_tools::Registry {
    let mut settings = Settings::default();
    settings.network.allow = allow.to_vec();
    weir_tools::Registry::serving(settings).unwrap()
}

async fn get(reg: &weir_tools::Registry, url: &str) -> Result<Value, String> {
    reg.call(ToolCall {
        tool_name: "http_request".into(),
        params: json!({"url": url}),
        idempotency_key: "k".into(),
        timeout: Duration::from_secs(5),
    })
    .await
    .map_err(|e| e.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssrf_payloads_are_refused_and_the_allowed_address_is_reached() {
    let target = server();
    let allowed = server();
    let reg = registry(&[format!("127.0.0.1:{allowed}")]);
    let p = target;
    let payloads: Vec<String> = vec![
        format!("http://127.0.0.1:{p}/"),
        format!("http://2130706433:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://0177.0.0.1:{p}/"),
        format!("http://0x7f.1:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://127.0.0.2:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("http://0:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://[::]:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://[::ffff:7f00:1]:{p}/"),
        format!("http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/"),
        format!("http://[::127.0.0.1]:{p}/"),
        format!("http://[64:ff9b::7f00:1]:{p}/"),
        format!("http://[2002:7f00:1::]:{p}/"),
        format!("http://localhost:{p}/"),
        format!("http://LOCALHOST:{p}/"),
        format!("http://[0:0:0:0:0:0:0:1]:{p}/"),
        format!("http://user:pw@127.0.0.1:{p}/"),
        format!("https://127.0.0.1:{p}/"),
        "http://169.254.169.254/latest/meta-data/".into(),
        "http://0251.0376.0251.0376/latest/meta-data/".into(),
        "http://[::ffff:a9fe:a9fe]/latest/meta-data/".into(),
        "http://[fd00:ec2::254]/latest/meta-data/".into(),
        format!("http://[fd00::1]:{p}/"),
        format!("http://[fe80::1]:{p}/"),
        format!("http://10.0.0.1:{p}/"),
        format!("http://172.16.0.1:{p}/"),
        format!("http://192.168.1.1:{p}/"),
        format!("http://100.64.0.1:{p}/"),
        format!("http://198.18.0.1:{p}/"),
        format!("http://224.0.0.1:{p}/"),
        format!("http://255.255.255.255:{p}/"),
        // The allowed address on another port.
        format!("http://127.0.0.1:{}/", allowed + 1),
        // Redirects from the allowed address to refused ones.
        format!("http://127.0.0.1:{allowed}/to?http://127.0.0.1:{p}/"),
        format!("http://127.0.0.1:{allowed}/to?http://localhost:{p}/"),
        format!("http://127.0.0.1:{allowed}/to?http://169.254.169.254/"),
        format!("http://127.0.0.1:{allowed}/to?http://[::1]:{p}/"),
    ];
    assert!(payloads.len() >= 30);
    let mut leaked = Vec::new();
    for url in &payloads {
        match get(&reg, url).await {
            Ok(v) => leaked.push(format!("{url} → {v}")),
            Err(e) if e.contains("network policy") && e.contains("[network] allow") => {}
            Err(e) => leaked.push(format!("{url} refused without naming the policy: {e}")),
        }
    }
    assert!(
        leaked.is_empty(),
        "{} of {} got through:\n{}",
        leaked.len(),
        payloads.len(),
        leaked.join("\n")
    );
    // The allowed address, and a redirect that stays on it, still work.
    let ok = get(&reg, &format!("http://127.0.0.1:{allowed}/ok"))
        .await
        .unwrap();
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["body"], "reached");
    let hop = get(
        &reg,
        &format!("http://127.0.0.1:{allowed}/to?http://127.0.0.1:{allowed}/x"),
    )
    .await
    .unwrap();
    assert_eq!(hop["body"], "reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cidr_allow_admits_its_block_and_weir_run_reaches_anything() {
    let target = server();
    let url = format!("http://127.0.0.1:{target}/");
    let open = registry(&["127.0.0.0/8".into()]);
    assert_eq!(get(&open, &url).await.unwrap()["body"], "reached");
    assert_eq!(
        get(&open, &format!("http://localhost:{target}/"))
            .await
            .unwrap()["body"],
        "reached"
    );
    // The CLI's registry (the user's own file, the user's own privileges) has no policy.
    let cli = weir_tools::Registry::new(Settings::default());
    assert_eq!(get(&cli, &url).await.unwrap()["body"], "reached");
    assert!(
        weir_tools::Registry::serving({
            let mut s = Settings::default();
            s.network.allow = vec!["not an address".into()];
            s
        })
        .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_webhooks_and_mcp_over_http_are_under_the_policy() {
    let target = server();
    let mut settings = Settings::default();
    settings.mcp.servers.insert(
        "docs".into(),
        toml::from_str(&format!("url = \"http://127.0.0.1:{target}/mcp\"")).unwrap(),
    );
    let reg = weir_tools::Registry::serving(settings).unwrap();
    let slack = reg
        .call(ToolCall {
            tool_name: "slack_message".into(),
            params: json!({"text": "hi", "webhook_url": format!("http://127.0.0.1:{target}/hook/SECRET")}),
            idempotency_key: "k".into(),
            timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_err();
    assert!(
        slack.message.contains("network policy"),
        "{}",
        slack.message
    );
    assert!(
        !slack.message.contains("SECRET"),
        "the webhook URL is a secret: {}",
        slack.message
    );
    let mcp = reg
        .call(ToolCall {
            tool_name: "mcp_call".into(),
            params: json!({"server": "docs", "tool": "search", "arguments": {}}),
            idempotency_key: "k".into(),
            timeout: Duration::from_secs(5),
        })
        .await
        .unwrap_err();
    assert!(mcp.message.contains("network policy"), "{}", mcp.message);
}

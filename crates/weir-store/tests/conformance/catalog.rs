//! The server's catalog: saved workflow versions, tokens and custom tools.

use weir_core::catalog::{NewVersion, TokenRow, ToolRow};

use super::*;

fn version(id: &str, name: &str, create_only: bool) -> NewVersion {
    NewVersion {
        workflow_id: id.into(),
        name: name.into(),
        dialect: "graph".into(),
        format: "json".into(),
        source: format!("{{\"name\": \"{name}\"}}"),
        created_at: weir_core::store::now_rfc3339(),
        create_only,
    }
}

pub(super) async fn workflow_versions_and_deletion(f: Fixture) {
    let c = f.catalog;
    assert!(!c.any_workflow_ever().await.unwrap());
    assert_eq!(
        c.put_workflow(&version("w", "one", true))
            .await
            .unwrap()
            .version,
        1
    );
    assert!(matches!(
        c.put_workflow(&version("w", "again", true)).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        c.put_workflow(&version("w", "two", false))
            .await
            .unwrap()
            .version,
        2
    );
    let latest = c.workflow("w").await.unwrap().latest;
    assert_eq!((latest.version, latest.name.as_str()), (2, "two"));
    assert_eq!(c.version("w", 1).await.unwrap().name, "one");
    let names: Vec<String> = c
        .versions("w")
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["one", "two"]);
    c.put_workflow(&version("a", "first", true)).await.unwrap();
    let ids: Vec<String> = c
        .workflows()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.latest.workflow_id)
        .collect();
    assert_eq!(ids, ["a", "w"]);
    c.delete_workflow("w").await.unwrap();
    assert!(matches!(
        c.workflow("w").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        c.delete_workflow("w").await,
        Err(StoreError::NotFound(_))
    ));
    // Runs pinned to a deleted workflow's versions can still read them.
    assert_eq!(c.version("w", 2).await.unwrap().name, "two");
    // Saved again after deletion: a new version after the old ones, never a reused number.
    assert_eq!(
        c.put_workflow(&version("w", "three", true))
            .await
            .unwrap()
            .version,
        3
    );
    assert!(c.any_workflow_ever().await.unwrap());
}

pub(super) async fn tokens_and_tools(f: Fixture) {
    let c = f.catalog;
    let token = TokenRow {
        id: "t1".into(),
        name: "ci".into(),
        scope: "run".into(),
        hash: vec![1, 2, 3],
        created_at: weir_core::store::now_rfc3339(),
        revoked_at: None,
    };
    c.create_token(&token).await.unwrap();
    assert_eq!(c.token("t1").await.unwrap().unwrap().hash, vec![1, 2, 3]);
    assert!(c.token("nope").await.unwrap().is_none());
    c.revoke_token("t1", "2026-01-01T00:00:00Z").await.unwrap();
    let listed = c.tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].revoked_at.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
    assert!(matches!(
        c.revoke_token("nope", "x").await,
        Err(StoreError::NotFound(_))
    ));
    let tool = ToolRow {
        name: "crm".into(),
        definition: json!({"kind": "http", "url": "https://crm.example.com/{id}"}),
        created_at: weir_core::store::now_rfc3339(),
    };
    c.put_tool(&tool).await.unwrap();
    c.put_tool(&ToolRow {
        definition: json!({"kind": "http", "url": "https://b"}),
        ..tool.clone()
    })
    .await
    .unwrap();
    let tools = c.tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].definition["url"], "https://b");
    c.delete_tool("crm").await.unwrap();
    assert!(matches!(
        c.delete_tool("crm").await,
        Err(StoreError::NotFound(_))
    ));
}

pub(super) async fn trigger_states_are_kept_per_trigger(f: Fixture) {
    let c = f.catalog;
    assert!(c.trigger_states(None).await.unwrap().is_empty());
    c.pause_trigger("wf", "nightly", true, "2026-12-08T09:00:00.000Z")
        .await
        .unwrap();
    c.set_hook_token("wf", "github", &[7; 32], "2026-12-08T09:00:01.000Z")
        .await
        .unwrap();
    c.pause_trigger("other", "nightly", false, "2026-12-08T09:00:02.000Z")
        .await
        .unwrap();
    let wf = c.trigger_states(Some("wf")).await.unwrap();
    assert_eq!(wf.len(), 2);
    assert_eq!(
        (
            wf[1].name.as_str(),
            wf[1].paused,
            wf[1].token_hash.is_none()
        ),
        ("nightly", true, true)
    );
    assert_eq!(
        (wf[0].name.as_str(), wf[0].paused),
        ("github", false),
        "a token leaves the pause as it was"
    );
    assert_eq!(wf[0].token_hash.as_deref(), Some(&[7u8; 32][..]));
    // Resuming keeps the token; the time is the resume's.
    c.pause_trigger("wf", "github", true, "2026-12-08T09:00:03.000Z")
        .await
        .unwrap();
    c.pause_trigger("wf", "github", false, "2026-12-08T09:00:04.000Z")
        .await
        .unwrap();
    let wf = c.trigger_states(Some("wf")).await.unwrap();
    assert_eq!(wf[0].token_hash.as_deref(), Some(&[7u8; 32][..]));
    assert_eq!(wf[0].updated_at, "2026-12-08T09:00:04.000Z");
    assert_eq!(c.trigger_states(None).await.unwrap().len(), 3);
}

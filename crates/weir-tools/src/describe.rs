//! What an agent's model is told about each tool it may call: a name a model accepts, a
//! description, and the JSON Schema of its arguments. Built-in tools have theirs here;
//! custom HTTP tools take theirs from the placeholders of their URL, headers and body; MCP
//! tools bring theirs from the server (`tools/list`).

use serde_json::{Value, json};
use weir_core::ToolError;
use weir_core::model::ToolDef;
use weir_core::settings::CustomTool;

use crate::Registry;

/// A built-in tool's definition (`None`: not one a model may call, e.g. `mcp_call`, whose
/// tools are offered one by one as `mcp:SERVER/TOOL`).
fn built_in(name: &str) -> Option<ToolDef> {
    let (description, parameters) = match name {
        "http_request" => (
            "Make an HTTP request and return its status, headers and body.",
            json!({"type": "object", "required": ["url"], "additionalProperties": false,
                   "properties": {
                       "url": {"type": "string", "description": "http or https URL"},
                       "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]},
                       "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                       "query": {"type": "object", "additionalProperties": {"type": "string"}},
                       "body": {"description": "a string sent as is, or JSON"}}}),
        ),
        "slack_message" => (
            "Post a message to the workspace's Slack channel.",
            json!({"type": "object", "required": ["text"], "additionalProperties": false,
                   "properties": {"text": {"type": "string"}, "channel": {"type": "string"}}}),
        ),
        "send_email" => (
            "Send an email.",
            json!({"type": "object", "required": ["to", "subject"], "additionalProperties": false,
                   "properties": {
                       "to": {"type": "string", "description": "an address, or several separated by commas"},
                       "cc": {"type": "string"},
                       "subject": {"type": "string"},
                       "text": {"type": "string"},
                       "html": {"type": "string"}}}),
        ),
        "delay" => (
            "Wait a number of seconds.",
            json!({"type": "object", "required": ["seconds"], "additionalProperties": false,
                   "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 86400}}}),
        ),
        _ => return None,
    };
    Some(ToolDef {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
    })
}

/// A name a model accepts (letters, digits, `_` and `-`, at most 64 characters).
pub(crate) fn model_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.truncate(64);
    out
}

impl Registry {
    pub(crate) async fn describe_ref(
        &self,
        tool_ref: &str,
    ) -> Result<Vec<(String, ToolDef)>, ToolError> {
        if let Some(def) = built_in(tool_ref) {
            return Ok(vec![(tool_ref.to_string(), def)]);
        }
        if let Some(name) = tool_ref.strip_prefix("custom:") {
            let tool = self.settings.tools.get(name).ok_or_else(|| {
                ToolError::fatal(format!("custom tool `{name}` is not registered"))
            })?;
            return match tool {
                CustomTool::Http {
                    description,
                    parameters,
                    ..
                } => {
                    let names = tool.placeholders();
                    let properties: serde_json::Map<String, Value> = names
                        .iter()
                        .map(|n| (n.clone(), json!({"type": "string"})))
                        .collect();
                    let parameters = parameters.clone().unwrap_or_else(
                        || json!({"type": "object", "required": names, "properties": properties}),
                    );
                    Ok(vec![(
                        tool_ref.to_string(),
                        ToolDef {
                            name: model_name(name),
                            description: description
                                .clone()
                                .unwrap_or_else(|| format!("The `{name}` HTTP endpoint.")),
                            parameters,
                        },
                    )])
                }
                CustomTool::Mcp {
                    server,
                    tool: mcp_tool,
                    description,
                } => {
                    let listed = self.mcp.list(server).await?;
                    let found = listed
                        .into_iter()
                        .find(|t| t.name == *mcp_tool)
                        .ok_or_else(|| {
                            ToolError::fatal(format!(
                                "MCP server `{server}` has no tool `{mcp_tool}`"
                            ))
                        })?;
                    Ok(vec![(
                        tool_ref.to_string(),
                        ToolDef {
                            name: model_name(name),
                            description: description.clone().unwrap_or(found.description),
                            parameters: found.parameters,
                        },
                    )])
                }
            };
        }
        if let Some(rest) = tool_ref.strip_prefix("mcp:") {
            let (server, wanted) = rest.split_once('/').ok_or_else(|| {
                ToolError::fatal(format!(
                    "`{tool_ref}`: name an MCP tool as mcp:SERVER/TOOL, or mcp:SERVER/* for all of a server's tools"
                ))
            })?;
            let listed = self.mcp.list(server).await?;
            let picked: Vec<(String, ToolDef)> = listed
                .into_iter()
                .filter(|t| wanted == "*" || t.name == wanted)
                .map(|t| {
                    (
                        format!("mcp:{server}/{}", t.name),
                        ToolDef {
                            name: model_name(&t.name),
                            ..t
                        },
                    )
                })
                .collect();
            if picked.is_empty() {
                return Err(ToolError::fatal(format!(
                    "MCP server `{server}` has no tool `{wanted}`"
                )));
            }
            return Ok(picked);
        }
        Err(ToolError::fatal(format!(
            "`{tool_ref}` is not a tool a model can call: use a built-in tool (http_request, slack_message, send_email, delay), custom:NAME or mcp:SERVER/TOOL"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_http_tool_takes_its_parameters_from_its_placeholders() {
        let tool = CustomTool::Http {
            method: "GET".into(),
            url: "https://crm.example.com/leads/{lead_id}?q={ query }".into(),
            headers: [(
                "Authorization".to_string(),
                "Bearer {secrets.CRM}".to_string(),
            )]
            .into(),
            body: None,
            response: None,
            description: None,
            parameters: None,
        };
        assert_eq!(tool.placeholders(), ["lead_id", "query"]);
        assert_eq!(model_name("mcp:docs/get-sum"), "mcp_docs_get-sum");
        assert!(
            built_in("mcp_call").is_none(),
            "MCP tools are offered one by one"
        );
        assert!(built_in("delay").is_some());
    }
}

//! `weir init [FILE] [--dialect graph|machine|pipeline] [--force]`: writes a small workflow
//! that runs offline on the mock model, to start from.

use anyhow::Result;

use crate::Usage;
use crate::wiring::Env;

const GRAPH: &str = include_str!("init/graph.yaml");
const MACHINE: &str = include_str!("init/machine.yaml");
const PIPELINE: &str = include_str!("init/pipeline.yaml");

/// The starter workflow of a dialect, with `FILE` in its header replaced by `path`.
pub fn template(dialect: &str, path: &str) -> Result<String> {
    let text = match dialect {
        "graph" => GRAPH,
        "machine" => MACHINE,
        "pipeline" => PIPELINE,
        other => {
            return Err(Usage(format!(
                "--dialect {other}: the dialects are graph, machine and pipeline"
            ))
            .into());
        }
    };
    Ok(text.replace("weir run FILE", &format!("weir run {path}")))
}

pub fn run(env: &Env, args: crate::cli::InitArgs) -> Result<u8> {
    let (file, dialect, force) = (args.file.as_str(), args.dialect.as_str(), args.force);
    let text = template(dialect, file)?;
    let path = std::path::Path::new(file);
    if path.exists() && !force {
        return Err(Usage(format!(
            "{file} already exists; pick another name, or pass --force to overwrite it"
        ))
        .into());
    }
    // What is written must be a workflow this workspace runs.
    if let Err(diags) = crate::validate::compile(env, file, &text) {
        for d in &diags {
            eprint!("{}", d.render(Some(&text)));
        }
        return Err(anyhow::anyhow!(
            "the {dialect} starter does not validate in this workspace (see above); this is a bug in weir"
        ));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, &text).map_err(|e| Usage(format!("cannot write {file}: {e}")))?;
    println!("wrote {file} ({dialect} dialect, runs offline on the mock model)");
    println!("  run it:      weir run {file}   (or --input '{{\"topic\": \"volcanoes\"}}')");
    println!("  check it:    weir validate {file}");
    println!("  the dialect: docs/{dialect}.md");
    Ok(0)
}

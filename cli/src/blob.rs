//! `cairn blob put|get`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cairn::BlobHash;

use super::args::BlobCommand;
use super::Settings;

/// Parses a blob hash given on the command line, with an error that says what is wrong.
pub fn parse_hash(s: &str) -> Result<BlobHash> {
    BlobHash::from_hex(s.trim()).map_err(|e| {
        super::usage(format!(
            "{e} (blob hashes are 64 hex digits, as printed by `cairn blob put`)"
        ))
    })
}

/// Runs `cairn blob ...`.
pub fn run(settings: &Settings, cmd: BlobCommand) -> Result<ExitCode> {
    match cmd {
        BlobCommand::Put { files } => {
            let store = settings.open_write()?;
            let mut out = Vec::new();
            let mut stdin_read = false;
            for f in &files {
                let (hash, len) = if f.as_os_str() == "-" {
                    // Read once: a second `-` would store an empty blob.
                    if std::mem::replace(&mut stdin_read, true) {
                        anyhow::bail!("`-` (stdin) is given more than once");
                    }
                    let mut r = std::io::BufReader::with_capacity(1 << 20, std::io::stdin().lock());
                    store
                        .blobs()?
                        .put_reader(&mut r)
                        .context("blob put: read stdin")?
                } else if f.is_dir() {
                    anyhow::bail!(
                        "blob put: `{}` is a directory; give files (or `-` for stdin)",
                        f.display()
                    );
                } else {
                    store
                        .blobs()?
                        .put_file(f)
                        .with_context(|| format!("blob put: input file {}", f.display()))?
                };
                out.push((hash, len, f));
            }
            store.blobs()?.sync().context("make blobs durable")?;
            for (hash, len, f) in out {
                outln!("{hash}  {len:>10}  {}", f.display());
            }
            store.close()?;
        }
        BlobCommand::Get { hash } => {
            let hash = parse_hash(&hash)?;
            let store = settings.open_read()?;
            let mut stdout = std::io::stdout().lock();
            store.blobs()?.get_to(&hash, &mut stdout)?;
            stdout.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

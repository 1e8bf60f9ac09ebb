//! AWS shared configuration profiles (`~/.aws/credentials`,
//! `~/.aws/config`), read as the AWS CLI reads them, for what
//! `object_store`'s builder does not read itself.
//!
//! `object_store` takes its settings from the `AWS_*` environment
//! variables only. Users of the AWS CLI keep them in profiles instead, so
//! an `s3://` archive also reads the profile `AWS_PROFILE` names
//! (`default` when unset): its static keys (`aws_access_key_id`,
//! `aws_secret_access_key`, `aws_session_token`), `region` and
//! `endpoint_url`. As in the AWS CLI, an environment variable wins over
//! the profile's value, and the credentials file wins over the config file
//! for keys. Profiles whose credentials come from elsewhere (`role_arn`,
//! `sso_*`, `credential_process`, `web_identity_token_file`) are refused
//! with a message saying how to get static keys, never silently ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ReplicateError;

/// The keys of a profile an archive uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name.
    pub name: String,
    /// `aws_access_key_id`.
    pub access_key_id: Option<String>,
    /// `aws_secret_access_key`.
    pub secret_access_key: Option<String>,
    /// `aws_session_token`.
    pub session_token: Option<String>,
    /// `region`.
    pub region: Option<String>,
    /// `endpoint_url` (an S3-compatible server).
    pub endpoint_url: Option<String>,
}

/// The largest profile file read: shared config files are a few KB; a
/// bigger one is not what the user meant to point at.
pub const MAX_PROFILE_FILE_BYTES: u64 = 1 << 20;

/// Keys that mean the credentials come from somewhere cairn does not go
/// (an assumed role, SSO, a helper process, a web identity token).
const UNSUPPORTED_SOURCES: [&str; 5] = [
    "role_arn",
    "sso_session",
    "sso_start_url",
    "credential_process",
    "web_identity_token_file",
];

/// Where the shared files are and which profile to read: from
/// `AWS_PROFILE`, `AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE` and
/// `HOME`, as the AWS CLI finds them.
#[derive(Clone, Debug)]
pub struct Sources {
    /// The profile's name.
    pub profile: String,
    /// True if `AWS_PROFILE` named it (then a missing profile is an error).
    pub named: bool,
    /// The credentials file.
    pub credentials: Option<PathBuf>,
    /// The config file.
    pub config: Option<PathBuf>,
}

impl Sources {
    /// The sources the environment names.
    pub fn from_env() -> Sources {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let home = var("HOME").map(PathBuf::from);
        let profile = var("AWS_PROFILE").and_then(|p| p.into_string().ok());
        Sources {
            named: profile.is_some(),
            profile: profile.unwrap_or_else(|| "default".to_string()),
            credentials: var("AWS_SHARED_CREDENTIALS_FILE")
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials"))),
            config: var("AWS_CONFIG_FILE")
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".aws/config"))),
        }
    }
}

/// Reads the profile `src` names. `Ok(None)` when no file has it and
/// `AWS_PROFILE` did not name it; an error when it named one that is not
/// there, when a file cannot be read, or when the profile gets its
/// credentials from a source cairn does not support.
pub fn load(src: &Sources) -> Result<Option<Profile>, ReplicateError> {
    let creds = match &src.credentials {
        Some(p) => read_ini(p)?,
        None => BTreeMap::new(),
    };
    let config = match &src.config {
        Some(p) => read_ini(p)?,
        None => BTreeMap::new(),
    };
    // The config file names a profile `[profile NAME]`, except `[default]`.
    let config_section = if src.profile == "default" {
        "default".to_string()
    } else {
        format!("profile {}", src.profile)
    };
    let c = creds.get(&src.profile);
    let f = config.get(&config_section);
    if c.is_none() && f.is_none() {
        if src.named {
            return Err(ReplicateError::Config(format!(
                "AWS_PROFILE names the profile `{}`, which neither {} nor {} has",
                src.profile,
                shown(&src.credentials),
                shown(&src.config)
            )));
        }
        return Ok(None);
    }
    let get = |k: &str| {
        c.and_then(|s| s.get(k))
            .or_else(|| f.and_then(|s| s.get(k)))
            .cloned()
    };
    let p = Profile {
        name: src.profile.clone(),
        access_key_id: get("aws_access_key_id"),
        secret_access_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region: f
            .and_then(|s| s.get("region"))
            .cloned()
            .or_else(|| get("region")),
        endpoint_url: get("endpoint_url"),
    };
    let unsupported = UNSUPPORTED_SOURCES.into_iter().find(|k| get(k).is_some());
    check(&p, unsupported)?;
    Ok(Some(p))
}

/// Refuses a profile cairn cannot use as it is: credentials from a source
/// cairn does not fetch (`unsupported`, the key that names it) and no
/// static keys, or half a key pair.
fn check(p: &Profile, unsupported: Option<&str>) -> Result<(), ReplicateError> {
    if p.access_key_id.is_none() {
        if let Some(k) = unsupported {
            return Err(ReplicateError::Config(format!(
                "the AWS profile `{}` gets its credentials through `{k}`, which cairn does not \
                 support; give it static keys, or export them first \
                 (`eval \"$(aws configure export-credentials --profile {} --format env)\"`)",
                p.name, p.name
            )));
        }
    }
    if p.access_key_id.is_some() != p.secret_access_key.is_some() {
        return Err(ReplicateError::Config(format!(
            "the AWS profile `{}` has {} but not {}",
            p.name,
            if p.access_key_id.is_some() {
                "aws_access_key_id"
            } else {
                "aws_secret_access_key"
            },
            if p.access_key_id.is_some() {
                "aws_secret_access_key"
            } else {
                "aws_access_key_id"
            },
        )));
    }
    Ok(())
}

fn shown(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map_or_else(|| "(no file)".to_string(), |p| p.display().to_string())
}

/// An INI file's sections: section name -> key -> value.
type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// One INI file: section name -> key -> value. A missing file is empty.
/// Keys are lower-cased; values are trimmed; `#` and `;` start comment
/// lines; nested (indented) `s3 =` sub-sections are skipped.
fn read_ini(path: &Path) -> Result<Sections, ReplicateError> {
    let io = |e: std::io::Error| ReplicateError::Io {
        op: "read the AWS profile file",
        path: path.to_path_buf(),
        source: e,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(io(e)),
    };
    if meta.len() > MAX_PROFILE_FILE_BYTES {
        return Err(ReplicateError::Config(format!(
            "{}: {} bytes, more than an AWS profile file holds (at most {MAX_PROFILE_FILE_BYTES})",
            path.display(),
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    parse_ini(&text).map_err(|(line, what)| {
        ReplicateError::Config(format!("{}:{line}: {what}", path.display()))
    })
}

/// [`read_ini`]'s parser; an error is (line number, what is wrong).
fn parse_ini(text: &str) -> Result<Sections, (usize, &'static str)> {
    let mut out = Sections::new();
    let mut section: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            // A nested value (`s3 =` followed by indented keys): not one
            // cairn reads.
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let name = name
                .strip_suffix(']')
                .ok_or((i + 1, "a section header without its closing `]`"))?;
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            section = Some(name);
            continue;
        }
        let (k, v) = line.split_once('=').ok_or((
            i + 1,
            "a line that is neither `[section]` nor `key = value`",
        ))?;
        let Some(s) = &section else {
            return Err((i + 1, "a `key = value` line before any `[section]`"));
        };
        if let Some(keys) = out.get_mut(s) {
            keys.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(creds: &str, config: &str, profile: Option<&str>) -> (tempfile::TempDir, Sources) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("credentials"), creds).unwrap();
        std::fs::write(d.path().join("config"), config).unwrap();
        let src = Sources {
            profile: profile.unwrap_or("default").to_string(),
            named: profile.is_some(),
            credentials: Some(d.path().join("credentials")),
            config: Some(d.path().join("config")),
        };
        (d, src)
    }

    #[test]
    fn reads_keys_from_credentials_and_region_from_config() {
        let (_d, src) = files(
            "[default]\naws_access_key_id = AK\naws_secret_access_key=SK\n\n[other]\naws_access_key_id = X\naws_secret_access_key = Y\n",
            "# comment\n[default]\nregion = eu-west-1\n[profile other]\nregion = us-west-2\nendpoint_url = http://127.0.0.1:8333\ns3 =\n  addressing_style = path\n",
            None,
        );
        let p = load(&src).unwrap().unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("AK"));
        assert_eq!(p.secret_access_key.as_deref(), Some("SK"));
        assert_eq!(p.region.as_deref(), Some("eu-west-1"));
        assert_eq!(p.endpoint_url, None);
        let src = Sources {
            profile: "other".into(),
            named: true,
            ..src
        };
        let p = load(&src).unwrap().unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("X"));
        assert_eq!(p.region.as_deref(), Some("us-west-2"));
        assert_eq!(p.endpoint_url.as_deref(), Some("http://127.0.0.1:8333"));
    }

    #[test]
    fn keys_in_the_config_file_count_and_the_credentials_file_wins() {
        let (_d, src) = files(
            "[p]\naws_access_key_id = FROM_CREDS\naws_secret_access_key = S\n",
            "[profile p]\naws_access_key_id = FROM_CONFIG\naws_secret_access_key = S2\n",
            Some("p"),
        );
        let p = load(&src).unwrap().unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("FROM_CREDS"));
        assert_eq!(p.secret_access_key.as_deref(), Some("S"));
    }

    #[test]
    fn a_named_profile_that_is_missing_is_an_error_and_an_unnamed_one_is_not() {
        let (_d, src) = files("", "", Some("ghost"));
        let err = load(&src).unwrap_err().to_string();
        assert!(err.contains("`ghost`"), "{err}");
        let (_d, src) = files("", "", None);
        assert_eq!(load(&src).unwrap(), None);
        let src = Sources {
            credentials: Some(PathBuf::from("/nonexistent/credentials")),
            config: None,
            ..src
        };
        assert_eq!(load(&src).unwrap(), None);
    }

    #[test]
    fn credentials_from_a_role_or_sso_are_refused_with_the_way_out() {
        for key in UNSUPPORTED_SOURCES {
            let (_d, src) = files("", &format!("[profile r]\n{key} = x\n"), Some("r"));
            let err = load(&src).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains("export-credentials"),
                "{err}"
            );
        }
    }

    #[test]
    fn half_a_key_pair_and_bad_lines_are_errors_naming_where() {
        let (_d, src) = files("[default]\naws_access_key_id = A\n", "", None);
        let err = load(&src).unwrap_err().to_string();
        assert!(err.contains("aws_secret_access_key"), "{err}");
        let (_d, src) = files("[default\n", "", None);
        let err = load(&src).unwrap_err().to_string();
        assert!(
            err.contains("credentials:1") && err.contains("`]`"),
            "{err}"
        );
        let (_d, src) = files("key = v\n", "", None);
        let err = load(&src).unwrap_err().to_string();
        assert!(err.contains("before any"), "{err}");
        let (_d, src) = files("[default]\njust text\n", "", None);
        let err = load(&src).unwrap_err().to_string();
        assert!(err.contains("credentials:2"), "{err}");
    }
}

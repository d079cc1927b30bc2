//! The resource bounds a user may set (issue 25 §4; README "Bounds"): from the process
//! environment only — never a `.env` file, which an agent can write — like the egress settings.
//!
//! | variable | default | what |
//! |---|---|---|
//! | `FLOWERBOX_OBJECT_LIMIT` | 100M | largest git object a worker's branch may bring back |
//! | `FLOWERBOX_BRANCH_LIMIT` | 1G | most bytes of objects one branch brings back at a time |
//! | `FLOWERBOX_DISK_BUDGET` | 20G | disk a run's agents may add (workspace, worktrees, workbench, containers' writable layers) |
//!
//! Sizes are whole numbers of bytes with an optional binary suffix `K`, `M`, `G`, `T` (`KiB`,
//! `MiB`, ... also read).

use super::error::CliError;
use super::host::Host;
use crate::flow::disk::DiskBudget;
use crate::isolate::ObjectLimits;

/// The bounds, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// What a worker's branch may bring back.
    pub objects: ObjectLimits,
    /// What a run's agents may add to the disk.
    pub disk: DiskBudget,
}

/// Parses a size: digits with an optional binary suffix (`512`, `100M`, `2GiB`, `1.5G` no).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().ok()?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift).filter(|&b| b > 0)
}

/// Reads the bounds from `host`'s environment.
///
/// # Errors
/// [`CliError::Usage`] (exit 2) for a value that is not a positive size.
pub fn bounds(host: &Host) -> Result<Bounds, CliError> {
    let size = |key: &str, default: u64| -> Result<u64, CliError> {
        match host.var(key) {
            None => Ok(default),
            Some(v) => parse_size(v).ok_or_else(|| {
                CliError::Usage(format!(
                    "{key}={v} 不是大小:写正整数字节数,可带 K/M/G/T(比如 100M、20G)"
                ))
            }),
        }
    };
    let defaults = ObjectLimits::default();
    Ok(Bounds {
        objects: ObjectLimits {
            object: size("FLOWERBOX_OBJECT_LIMIT", defaults.object)?,
            branch: size("FLOWERBOX_BRANCH_LIMIT", defaults.branch)?,
        },
        disk: DiskBudget {
            bytes: size("FLOWERBOX_DISK_BUDGET", DiskBudget::default().bytes)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(vars: &[(&str, &str)]) -> Host {
        Host {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: std::env::temp_dir(),
            stdin_is_terminal: false,
        }
    }

    #[test]
    fn the_bounds_come_from_the_environment_or_default_and_bad_values_are_usage_errors() {
        let b = bounds(&host(&[])).unwrap();
        assert_eq!(b.objects, ObjectLimits::default());
        assert_eq!(b.disk, DiskBudget::default());
        let b = bounds(&host(&[
            ("FLOWERBOX_OBJECT_LIMIT", "10M"),
            ("FLOWERBOX_BRANCH_LIMIT", "20M"),
            ("FLOWERBOX_DISK_BUDGET", "50M"),
        ]))
        .unwrap();
        assert_eq!((b.objects.object, b.objects.branch), (10 << 20, 20 << 20));
        assert_eq!(b.disk.bytes, 50 << 20);
        let (_, line) = crate::flow::disk::doctor_line(b.disk, &std::env::temp_dir());
        assert!(
            line.starts_with("每次运行 50.0 MiB(FLOWERBOX_DISK_BUDGET)"),
            "{line}"
        );
        let e = bounds(&host(&[("FLOWERBOX_DISK_BUDGET", "lots")])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("FLOWERBOX_DISK_BUDGET=lots"), "{e}");
    }

    #[test]
    fn sizes_take_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("100M"), Some(100 << 20));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size(" 50mb "), Some(50 << 20));
        for bad in ["", "0", "-1", "1.5G", "10X", "G", "99999999999T"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}

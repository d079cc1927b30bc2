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

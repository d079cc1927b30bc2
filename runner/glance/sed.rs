//! `sed` without in-place editing and with scripts that only print, delete, quit or
//! substitute.

use super::lex::Word;
use super::{refuse, Refusal};

/// `sed` is allowed without `-i`/`-f` and with scripts made only of printing, deleting, quitting,
/// substituting (flags `g p i I m M` and digits) and transliterating commands. `w`, `e`, `r`
/// and `s///w`/`s///e` read, write or execute, so they are refused.
pub(super) fn check_sed(args: &[Word]) -> Result<(), Refusal> {
    let mut scripts: Vec<&str> = Vec::new();
    let mut positional: Vec<&Word> = Vec::new();
    let mut after_dd = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let t = a.text.as_str();
        i += 1;
        if a.dynamic && !after_dd {
            return refuse("`sed`: put patterns and variables after `--`");
        }
        if after_dd || t == "-" || !t.starts_with('-') {
            positional.push(a);
            continue;
        }
        if t == "--" {
            after_dd = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (key, val) = match long.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (long, None),
            };
            match key {
                "quiet" | "silent" | "regexp-extended" | "separate" | "null-data"
                | "unbuffered" | "posix" | "debug" | "sandbox" => {}
                "expression" => match val {
                    Some(v) => scripts.push(v),
                    None => match args.get(i) {
                        Some(v) => {
                            scripts.push(&v.text);
                            i += 1;
                        }
                        None => return refuse("`sed --expression` without a script"),
                    },
                },
                "line-length" => {
                    if val.is_none() {
                        i += 1;
                    }
                }
                _ => return refuse(format!("`sed --{key}` is not allowed in a glance")),
            }
            continue;
        }
        let cluster = &t[1..];
        for (k, ch) in cluster.char_indices() {
            match ch {
                'n' | 'E' | 'r' | 's' | 'z' | 'u' => {}
                'e' | 'l' => {
                    let rest = &cluster[k + 1..];
                    let value = if rest.is_empty() {
                        let v = args.get(i).map(|w| w.text.as_str());
                        i += 1;
                        v
                    } else {
                        Some(rest)
                    };
                    match (ch, value) {
                        ('e', Some(v)) => scripts.push(v),
                        ('e', None) => return refuse("`sed -e` without a script"),
                        _ => {}
                    }
                    break;
                }
                'i' => return refuse("`sed -i` edits files in place: not a glance"),
                _ => return refuse(format!("`sed -{ch}` is not allowed in a glance")),
            }
        }
    }
    if scripts.is_empty() {
        match positional.first() {
            Some(w) => scripts.push(&w.text),
            None => return refuse("`sed` without a script"),
        }
    }
    for s in scripts {
        check_sed_script(s)?;
    }
    Ok(())
}

fn check_sed_script(script: &str) -> Result<(), Refusal> {
    let c: Vec<char> = script.chars().collect();
    let mut i = 0;
    let bad = |why: &str| refuse(format!("sed script `{script}`: {why}"));
    loop {
        while i < c.len() && (c[i].is_whitespace() || c[i] == ';') {
            i += 1;
        }
        if i >= c.len() {
            return Ok(());
        }
        // Up to two addresses, then `!`.
        for n in 0..2 {
            if n == 1 {
                if c.get(i) != Some(&',') {
                    break;
                }
                i += 1;
            }
            match c.get(i) {
                Some('$') => i += 1,
                Some(d) if d.is_ascii_digit() || ((*d == '+' || *d == '~') && n == 1) => {
                    i += 1;
                    while i < c.len() && c[i].is_ascii_digit() {
                        i += 1;
                    }
                    if c.get(i) == Some(&'~') {
                        i += 1;
                        while i < c.len() && c[i].is_ascii_digit() {
                            i += 1;
                        }
                    }
                }
                Some('/') => {
                    i = match skip_delimited(&c, i + 1, '/') {
                        Some(j) => j,
                        None => return bad("unterminated address"),
                    };
                    while matches!(c.get(i), Some('I') | Some('M')) {
                        i += 1;
                    }
                }
                _ if n == 1 => return bad("bad second address"),
                _ => {}
            }
        }
        while c.get(i) == Some(&' ') {
            i += 1;
        }
        if c.get(i) == Some(&'!') {
            i += 1;
        }
        while c.get(i) == Some(&' ') {
            i += 1;
        }
        let Some(&cmd) = c.get(i) else {
            return bad("address without a command");
        };
        i += 1;
        match cmd {
            'p' | 'P' | 'd' | 'D' | '=' | 'l' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | 'z'
            | '{' | '}' => {}
            'q' | 'Q' => {
                while i < c.len() && c[i].is_ascii_digit() {
                    i += 1;
                }
            }
            's' | 'y' => {
                let Some(&delim) = c.get(i) else {
                    return bad("unterminated s command");
                };
                if delim == '\\' || delim == '\n' {
                    return bad("bad delimiter");
                }
                let Some(j) = skip_delimited(&c, i + 1, delim) else {
                    return bad("unterminated command");
                };
                let Some(k) = skip_delimited(&c, j, delim) else {
                    return bad("unterminated command");
                };
                i = k;
                if cmd == 's' {
                    while let Some(&f) = c.get(i) {
                        match f {
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' => i += 1,
                            d if d.is_ascii_digit() => i += 1,
                            'w' | 'W' | 'e' => return bad("the `w`/`e` flag writes or executes"),
                            _ => break,
                        }
                    }
                }
            }
            'w' | 'W' | 'e' | 'r' | 'R' => return bad("`r`/`w`/`e` read, write or execute files"),
            _ => return bad("only p, d, q, s, y and friends are allowed"),
        }
        while c.get(i) == Some(&' ') {
            i += 1;
        }
        match c.get(i) {
            None => return Ok(()),
            Some(';') | Some('\n') | Some('}') => {}
            Some(_) => return bad("expected `;` between commands"),
        }
    }
}

/// Index after the next unescaped `delim` starting at `i`, or `None` if there is none.
fn skip_delimited(c: &[char], mut i: usize, delim: char) -> Option<usize> {
    while i < c.len() {
        if c[i] == '\\' {
            i += 2;
            continue;
        }
        if c[i] == delim {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

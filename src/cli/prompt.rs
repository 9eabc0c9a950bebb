//! Asking the user: a visible prompt for names, no echo for passwords. When
//! stdin is not a terminal each answer is one line of stdin, so scripts can
//! pipe them (`printf 'pw\n' | tiphys login …`).

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Context as _, bail};

fn interactive() -> bool {
    std::io::stdin().is_terminal()
}

/// One line of stdin without its line ending; `what` names it if stdin ended.
fn read_line(what: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .with_context(|| format!("cannot read the {what} from stdin"))?;
    if n == 0 {
        bail!("no {what} given: stdin ended (pass it as a flag, or pipe it on stdin)");
    }
    let trimmed = line.strip_suffix('\n').unwrap_or(&line);
    Ok(trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned())
}

/// A visible answer, such as a username; the prompt goes to stderr.
pub fn text(prompt: &str, what: &str) -> anyhow::Result<String> {
    if interactive() {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
    }
    let answer = read_line(what)?.trim().to_owned();
    if answer.is_empty() {
        bail!("no {what} given");
    }
    Ok(answer)
}

/// A secret, read without echo from the terminal (or a line of piped stdin).
pub fn secret(prompt: &str, what: &str) -> anyhow::Result<String> {
    let answer = if interactive() {
        rpassword::prompt_password(prompt).with_context(|| format!("cannot read the {what}"))?
    } else {
        read_line(what)?
    };
    if answer.is_empty() {
        bail!("no {what} given");
    }
    Ok(answer)
}

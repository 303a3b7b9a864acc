//! The operators' web page of `dlq serve` in a real headless Chromium (chromedriver), against a
//! real nats-server and a job whose items fail: the page asks for the token, filters with CEL
//! (and shows the API's parse error next to the box), opens an item, retries every item matching
//! the filter after a dry-run count and a confirmation, and the list is then empty while the
//! stream holds their `item_removed` events. A hostile item (markup and `javascript:` in its data
//! and error message) shows as text and runs nothing. Screenshots of every page go to
//! `target/web-screenshots/`. The page's headers and routes over plain HTTP: `tests/web_api.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use dlq_testkit::browser::{screenshot_dir, Browser};
use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::serve::{Serve, FAIL_UNTIL_FIXED};
use dlq_testkit::stream::stream_messages;
use dlq_testkit::{wait_for, NatsServer};
use fantoccini::Locator;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

const TOKEN: &str = "web-page-test-token-0123456789";

/// What the hostile item carries in its data and its error message.
const HOSTILE: &str = r#"<script>window.__pwned = "script"</script> "><img src=x onerror="window.__pwned='img';alert(1)"> javascript:window.__pwned='js'"#;

/// Clears `css` and types `text` into it.
async fn type_into(browser: &Browser, css: &str, text: &str) {
    let field = browser.find(css).await;
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

async fn click(browser: &Browser, css: &str) {
    browser.find(css).await.click().await.unwrap();
}

/// Nothing of the hostile payload ran: no global set, no alert open.
async fn nothing_ran(browser: &Browser) {
    let pwned = browser
        .client
        .execute(
            "return window.__pwned === undefined ? null : String(window.__pwned);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(pwned, Value::Null, "the hostile payload ran");
    assert!(
        browser.client.get_alert_text().await.is_err(),
        "an alert is open: the payload ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_the_dlq_from_the_page() {
    let mut nats = NatsServer::start();
    let flow = Flow::new(DLQ, &nats.url());
    let mut items: Vec<Value> = (0..4)
        .map(|i| json!({"id": format!("f{i}"), "kind": "fixable", "msg": format!("upstream said no to f{i}")}))
        .collect();
    items.push(json!({"id": "evil", "kind": "hostile", "msg": HOSTILE, "note": HOSTILE}));
    flow.items(&items);
    let (code, report) = flow::report(&flow.run(FAIL_UNTIL_FIXED, "web"));
    assert_eq!(code, 0, "{report}");
    assert_eq!(counts(&report).1, 5, "every item is dead-lettered");

    let server = Serve::start(&flow.env, TOKEN);
    let port = server.port;
    let shots = screenshot_dir();
    let browser = Browser::start().await;
    let page = format!("http://127.0.0.1:{port}/");
    browser.client.goto(&page).await.unwrap();

    // The page asks for the token before showing any data.
    browser.find("#token-form").await;
    browser.screenshot(&shots, "0-token").await;
    // A wrong token is refused and asked for again.
    type_into(&browser, "#token-input", "not-the-token").await;
    click(&browser, "#token-submit").await;
    browser
        .text_until("#token-form", |t| t.contains("refused this token"))
        .await;
    type_into(&browser, "#token-input", TOKEN).await;
    click(&browser, "#token-submit").await;
    browser.text_until("#items-total", |t| t == "5").await;
    browser.text_until("#bus-state", |t| t == "connected").await;
    let by_job = browser.text_until("#by-job", |t| t.contains("web")).await;
    assert!(by_job.contains('5'), "{by_job}");
    browser.find("#hourly-chart rect").await;
    browser.find("#by-signature").await;
    browser.screenshot(&shots, "1-overview").await;

    // The list shows every item, the hostile one as text.
    browser
        .client
        .goto(&format!("{page}#/items"))
        .await
        .unwrap();
    let table = browser
        .text_until("#items-table", |t| t.contains("evil"))
        .await;
    assert!(table.contains("<img src=x onerror="), "{table}");
    nothing_ran(&browser).await;
    browser.screenshot(&shots, "2-items").await;

    // A CEL filter that does not parse: the API's error next to the box, nothing listed.
    type_into(&browser, "#filter", "item.kind ==").await;
    click(&browser, "#apply-filter").await;
    let error = browser.text_until("#filter-error", |t| !t.is_empty()).await;
    assert!(error.to_lowercase().contains("filter"), "{error}");
    browser.screenshot(&shots, "3-filter-error").await;

    type_into(&browser, "#filter", r#"item.kind == "fixable""#).await;
    click(&browser, "#apply-filter").await;
    browser
        .text_until("#matched", |t| t.starts_with("4 matching"))
        .await;
    let table = browser.find("#items-table").await.text().await.unwrap();
    assert!(!table.contains("evil"), "{table}");

    // Open an item: data, the failure in full, its job events.
    click(&browser, "a.item-link").await;
    let data = browser
        .text_until("#item-data", |t| t.contains("fixable"))
        .await;
    assert!(
        data.contains("\"kind\": \"fixable\""),
        "pretty-printed: {data}"
    );
    browser
        .text_until(".message-full", |t| t.contains("upstream said no"))
        .await;
    browser
        .text_until("#item-events", |t| t.contains("ItemDeadLettered"))
        .await;
    browser.screenshot(&shots, "4-detail").await;
    browser.scroll_to("#failures").await;
    browser.screenshot(&shots, "4-detail-failures").await;

    // The hostile item's page: every payload is text, nothing ran.
    browser
        .client
        .goto(&format!("{page}#/item/web/evil"))
        .await
        .unwrap();
    let data = browser
        .text_until("#item-data", |t| t.contains("<script>"))
        .await;
    assert!(data.contains("javascript:window.__pwned"), "{data}");
    browser.find(".message-full").await;
    nothing_ran(&browser).await;
    let images = browser
        .client
        .find_all(Locator::Css("main img"))
        .await
        .unwrap();
    assert!(images.is_empty(), "the payload made an <img> element");
    let message = browser
        .text_until(".message-full", |t| t.contains("onerror"))
        .await;
    assert!(message.contains("<script>window.__pwned"), "{message}");
    browser.screenshot(&shots, "5-hostile-item").await;

    // "Fix" the work, then retry everything matching the filter: a dry-run count first, a
    // confirmation naming it and the rate limit, then the outcome.
    for i in 0..4 {
        flow.write(&format!("fixed-f{i}"), "");
    }
    let filtered = format!(
        "{page}#/items?filter={}",
        "item.kind%20%3D%3D%20%22fixable%22"
    );
    browser.client.goto(&filtered).await.unwrap();
    browser
        .text_until("#matched", |t| t.starts_with("4 matching"))
        .await;
    // First one checked row alone ...
    click(&browser, r#"input[aria-label="select f2"]"#).await;
    click(&browser, "#retry-selected").await;
    let confirm = browser
        .text_until("#confirm-text", |t| t.contains("Retry"))
        .await;
    assert!(confirm.starts_with("Retry 1 items (web: 1)"), "{confirm}");
    click(&browser, "#confirm-retry").await;
    let outcome = browser
        .text_until("#retry-outcome", |t| !t.is_empty())
        .await;
    assert_eq!(outcome, "1 resolved, 0 failed again, 0 skipped");
    click(&browser, "#reload").await;
    browser
        .text_until("#matched", |t| t.starts_with("3 matching"))
        .await;
    let table = browser.find("#items-table").await.text().await.unwrap();
    assert!(!table.contains("f2"), "{table}");
    // ... then everything the filter matches.
    click(&browser, "#retry-matching").await;
    let confirm = browser
        .text_until("#confirm-text", |t| t.contains("Retry"))
        .await;
    assert!(confirm.contains("Retry 3 items"), "{confirm}");
    assert!(confirm.contains("at most 10 items/s"), "{confirm}");
    browser.screenshot(&shots, "6-retry-confirm").await;
    click(&browser, "#confirm-retry").await;
    let outcome = browser
        .text_until("#retry-outcome", |t| !t.is_empty())
        .await;
    assert_eq!(outcome, "3 resolved, 0 failed again, 0 skipped");
    browser.screenshot(&shots, "7-retry-result").await;
    click(&browser, "#reload").await;
    browser
        .text_until("#matched", |t| t.starts_with("0 matching"))
        .await;
    assert!(browser
        .client
        .find(Locator::Css("#items-table"))
        .await
        .is_err());

    // Purge what is left (older than 0 days) while the bus is down: counted first, then
    // confirmed; the overview then shows the outage and the backlog drain by themselves.
    nats.kill();
    browser
        .client
        .goto(&format!("{page}#/actions"))
        .await
        .unwrap();
    browser.find("#purge-start").await;
    browser.screenshot(&shots, "8-actions").await;
    type_into(&browser, "#purge-days", "0").await;
    click(&browser, "#purge-start").await;
    let confirm = browser
        .text_until("#confirm-text", |t| t.contains("Purge"))
        .await;
    assert!(confirm.starts_with("Purge 1 items"), "{confirm}");
    click(&browser, "#confirm-action").await;
    browser
        .text_until("#action-outcome", |t| t == "1 items removed.")
        .await;
    browser
        .client
        .goto(&format!("{page}#/overview"))
        .await
        .unwrap();
    browser.text_until("#items-total", |t| t == "0").await;
    browser
        .text_until("#bus-state", |t| t == "disconnected")
        .await;
    browser.text_until("#backlog", |t| t != "0").await;
    browser.screenshot(&shots, "9-bus-outage").await;
    nats.restart();
    browser.text_until("#bus-state", |t| t == "connected").await;
    browser.text_until("#backlog", |t| t == "0").await;
    nothing_ran(&browser).await;
    browser.close().await;
    nothing_ran_in_log(&server);

    // The stream holds the removal of each resolved item, and of the purged one.
    let url = nats.url();
    let mut expected: BTreeSet<String> = (0..4).map(|i| format!("f{i} resolved")).collect();
    expected.insert("evil purged".into());
    wait_for(
        "the item_removed events of f0..f3 (resolved) and evil (purged) in the stream",
        Duration::from_secs(30),
        || async {
            let ids: BTreeSet<String> = stream_messages(&url, "DLQ")
                .await
                .iter()
                .filter(|(_, e)| e["kind"] == "item_removed")
                .map(|(_, e)| {
                    format!(
                        "{} {}",
                        e["item_id"].as_str().unwrap(),
                        e["reason"].as_str().unwrap()
                    )
                })
                .collect();
            ids == expected
        },
    )
    .await;

    // `dlq jobs` counts as of now: 4 of the 5 dead-lettered items resolved.
    drop(server);
    let jobs = flow.env.json(&["jobs"]);
    assert_eq!(jobs["summary"]["successful"], 4, "{jobs}");
    assert_eq!(jobs["summary"]["failed"], 1, "{jobs}");
}

/// The server logged no error about the page.
fn nothing_ran_in_log(server: &Serve) {
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// Many jobs: the overview's counts have separators, its by-job table shows the ten with the
/// most items, ties in natural order (bench-2 before bench-10), and the rest behind a button;
/// "Forget token" shows only once there is a token (issue 36).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_orders_and_pages_many_jobs() {
    let env = dlq_testkit::cli::Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    let out = env.run(&["generate", "--items", "1200", "--jobs", "12"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = Serve::start(&env, TOKEN);
    let browser = Browser::start().await;
    let page = format!("http://127.0.0.1:{}/", server.port);
    browser.client.goto(&page).await.unwrap();
    browser.find("#token-form").await;
    let forget = browser.find("#forget-token").await;
    assert!(
        !forget.is_displayed().await.unwrap(),
        "nothing to forget yet"
    );
    type_into(&browser, "#token-input", TOKEN).await;
    click(&browser, "#token-submit").await;
    browser.text_until("#items-total", |t| t == "1,200").await;
    assert!(browser
        .find("#forget-token")
        .await
        .is_displayed()
        .await
        .unwrap());
    let top = browser
        .text_until("#by-job", |t| t.contains("bench-9"))
        .await;
    assert_eq!(job_column(&top), benches(10), "{top}");
    click(&browser, "#by-job-all").await;
    let all = browser
        .text_until("#by-job", |t| t.contains("bench-11"))
        .await;
    assert_eq!(job_column(&all), benches(12), "{all}");
    browser.close().await;
}

/// The first column of a table's text, without its header.
fn job_column(table: &str) -> Vec<String> {
    let cells = table.lines().filter_map(|l| l.split_whitespace().next());
    cells.skip(1).map(str::to_owned).collect()
}

/// `bench-0` .. `bench-{n-1}`, the jobs `dlq generate` makes.
fn benches(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("bench-{i}")).collect()
}

/// The computed background colour of the page's body, as `[r, g, b]`.
async fn body_background(browser: &Browser) -> [u64; 3] {
    let colour = browser
        .client
        .execute(
            "return getComputedStyle(document.body).backgroundColor;",
            vec![],
        )
        .await
        .unwrap();
    let colour = colour.as_str().unwrap().to_owned();
    let parts: Vec<u64> = colour
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|p| p.trim().parse().unwrap())
        .collect();
    [parts[0], parts[1], parts[2]]
}

/// The page follows the browser's colour preference: dark with Chromium's
/// `--force-dark-mode` (which makes `prefers-color-scheme: dark` match), light without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_dark_when_the_browser_prefers_dark() {
    let env = dlq_testkit::cli::Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    assert!(env
        .run(&["generate", "--items", "10", "--jobs", "2"])
        .status
        .success());
    let server = Serve::start(&env, TOKEN);
    let page = format!("http://127.0.0.1:{}/", server.port);
    for (flags, dark) in [(&["--force-dark-mode"][..], true), (&[][..], false)] {
        let browser = Browser::start_with(flags).await;
        browser.client.goto(&page).await.unwrap();
        browser.find("#token-form").await;
        let prefers = browser
            .client
            .execute(
                "return matchMedia('(prefers-color-scheme: dark)').matches;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(prefers, Value::Bool(dark), "flags {flags:?}");
        let [r, g, b] = body_background(&browser).await;
        let brightness = (r + g + b) / 3;
        if dark {
            assert!(
                brightness < 60,
                "a dark preference gives rgb({r}, {g}, {b})"
            );
        } else {
            assert!(brightness > 200, "no preference gives rgb({r}, {g}, {b})");
        }
        type_into(&browser, "#token-input", TOKEN).await;
        click(&browser, "#token-submit").await;
        browser.text_until("#items-total", |t| t == "10").await;
        let name = if dark {
            "dark-overview"
        } else {
            "light-overview"
        };
        browser.screenshot(&screenshot_dir(), name).await;
        browser.close().await;
    }
}

/// The item list refreshes itself: an item a running job dead-letters after the page loaded
/// appears without a reload, under the filter the page was opened with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_item_list_shows_an_item_stored_after_it_loaded() {
    let flow = Flow::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    // `early` fails at once, `late` once `go` exists; `keep` holds the job (and its API) open
    // until `end` exists, then succeeds.
    flow.items(&[
        json!({"id": "early", "n": 0}),
        json!({"id": "late", "n": 1}),
        json!({"id": "keep", "n": 2}),
    ]);
    let workflow = r#"
name: held
mode: mapreduce
map:
  input: items.json
  json_path: "$.items[*]"
  max_parallel: 3
  agent_template:
    - shell: "wait_for() { while [ ! -f \"$DLQ_WORKFLOW_DIR/$1\" ]; do sleep 0.05; done; }; case ${item.n} in 2) wait_for end; exit 0;; 1) wait_for go;; esac; echo 'failed on purpose' >&2; exit 1"
"#;
    let job = flow.spawn_run(workflow, "held");
    // The running job serves the API (and the page) it announces in serve.json.
    let announced = flow.env.data.join("serve.json");
    let url = dlq_testkit::poll_until(Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&announced).ok()?;
        let doc: Value = serde_json::from_str(&text).ok()?;
        doc["url"].as_str().map(str::to_owned)
    })
    .expect("the job announced its API");
    let browser = Browser::start().await;
    let filter = "item.n%20%3E%3D%200";
    browser
        .client
        .goto(&format!("{url}/#/items?filter={filter}"))
        .await
        .unwrap();
    let table = browser
        .text_until("#items-table", |t| t.contains("early"))
        .await;
    assert!(!table.contains("late"), "{table}");
    browser
        .text_until("#matched", |t| t.starts_with("1 matching"))
        .await;
    flow.write("go", "");
    browser
        .text_until("#matched", |t| t.starts_with("2 matching"))
        .await;
    let table = browser.find("#items-table").await.text().await.unwrap();
    assert!(table.contains("early") && table.contains("late"), "{table}");
    let kept = browser.find("#filter").await.prop("value").await.unwrap();
    assert_eq!(kept.as_deref(), Some("item.n >= 0"), "the filter box");
    browser.close().await;
    flow.write("end", "");
    let out = job.wait_with_output().unwrap();
    let (code, report) = flow::report(&out);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        counts(&report).1,
        2,
        "early and late dead-lettered, keep succeeded: {report}"
    );
}

/// Deleting from the page: an item from its own page, the selected rows and every item
/// matching the filter, each after a dry-run count and a confirmation; each deletion is an
/// `item_removed` event with reason `deleted`, and a cancelled one deletes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_an_item_a_selection_and_the_filtered_set_from_the_page() {
    let env = dlq_testkit::cli::Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    env.demo("j1", 4);
    env.demo("j2", 2);
    let server = Serve::start(&env, TOKEN);
    let page = format!("http://127.0.0.1:{}/", server.port);
    let browser = Browser::start().await;
    browser.client.goto(&page).await.unwrap();
    type_into(&browser, "#token-input", TOKEN).await;
    click(&browser, "#token-submit").await;
    browser.text_until("#items-total", |t| t == "6").await;

    // One item, from its page: cancelled first (nothing deleted), then confirmed.
    let item = format!("{page}#/item/j1/item-0");
    browser.client.goto(&item).await.unwrap();
    browser
        .text_until("#item-title", |t| t.contains("item-0"))
        .await;
    click(&browser, "#delete-one").await;
    let confirm = browser
        .text_until("#confirm-text", |t| t.contains("Delete"))
        .await;
    assert!(confirm.starts_with("Delete 1 items"), "{confirm}");
    click(&browser, "#cancel-delete").await;
    click(&browser, "#delete-one").await;
    browser
        .text_until("#confirm-text", |t| t.contains("Delete 1 items"))
        .await;
    click(&browser, "#confirm-delete").await;
    browser
        .text_until("#delete-outcome", |t| t == "1 items deleted")
        .await;

    // The selected row of job j2.
    browser
        .client
        .goto(&format!("{page}#/items?job_id=j2"))
        .await
        .unwrap();
    browser
        .text_until("#matched", |t| t.starts_with("2 matching"))
        .await;
    click(&browser, ".row-check").await;
    click(&browser, "#delete-selected").await;
    browser
        .text_until("#confirm-text", |t| t.contains("Delete 1 items"))
        .await;
    click(&browser, "#confirm-delete").await;
    browser
        .text_until("#delete-outcome", |t| t == "1 items deleted")
        .await;

    // Every item the CEL filter matches.
    browser
        .client
        .goto(&format!(
            "{page}#/items?filter=job_id%20%3D%3D%20%22j1%22%20%26%26%20item_id%20!%3D%20%22item-1%22"
        ))
        .await
        .unwrap();
    browser
        .text_until("#matched", |t| t.starts_with("2 matching"))
        .await;
    click(&browser, "#delete-matching").await;
    browser
        .text_until("#confirm-text", |t| t.contains("Delete 2 items"))
        .await;
    click(&browser, "#confirm-delete").await;
    browser
        .text_until("#delete-outcome", |t| t == "2 items deleted")
        .await;
    browser.close().await;
    drop(server);

    let left: Vec<String> = env
        .items()
        .await
        .into_iter()
        .map(|i| format!("{}/{}", i.job_id, i.item_id))
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&"j1/item-1".to_owned()), "{left:?}");
    let deleted = env
        .events()
        .await
        .into_iter()
        .filter(|e| {
            matches!(
                &e.kind,
                dlq::domain::event::EventKind::ItemRemoved {
                    reason: dlq::domain::event::RemovalReason::Deleted,
                    ..
                }
            )
        })
        .count();
    assert_eq!(deleted, 4);
}

/// Whether the page has an element matching `css` (it renders each view at once, so once a
/// view's title is there its buttons are too, or never).
async fn present(browser: &Browser, css: &str) -> bool {
    let found = browser
        .client
        .execute(
            "return document.querySelector(arguments[0]) !== null;",
            vec![json!(css)],
        )
        .await
        .unwrap();
    found == json!(true)
}

/// A read-only token sees no retry, delete, clear or purge button (and the page names its
/// role); an operator token deletes an item, and the audit view names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_what_the_role_allows_and_the_audit_names_who() {
    let env = dlq_testkit::cli::Env::new(DLQ, dlq_testkit::DEAD_BUS_URL);
    env.demo("j1", 3);
    let tokens = env.path("tokens");
    std::fs::write(
        &tokens,
        "viewer view-token-0123\nops operator ops-token-0123\n",
    )
    .unwrap();
    let server = Serve::start_with(&env, TOKEN, &["--tokens-file", tokens.to_str().unwrap()]);
    let page = format!("http://127.0.0.1:{}/", server.port);
    let browser = Browser::start().await;
    browser.client.goto(&page).await.unwrap();
    type_into(&browser, "#token-input", "view-token-0123").await;
    click(&browser, "#token-submit").await;
    browser.text_until("#items-total", |t| t == "3").await;
    browser
        .text_until("#whoami-role", |t| t == "read-only")
        .await;

    browser
        .client
        .goto(&format!("{page}#/item/j1/item-0"))
        .await
        .unwrap();
    browser
        .text_until("#item-title", |t| t.contains("item-0"))
        .await;
    for button in ["#delete-one", "#retry-one", "#redrive-one"] {
        assert!(
            !present(&browser, button).await,
            "{button} shown to read-only"
        );
    }
    browser
        .client
        .goto(&format!("{page}#/items?job_id=j1"))
        .await
        .unwrap();
    browser
        .text_until("#matched", |t| t.starts_with("3 matching"))
        .await;
    for button in [
        "#delete-selected",
        "#delete-matching",
        "#retry-selected",
        "#redrive-selected",
        "#redrive-matching",
    ] {
        assert!(
            !present(&browser, button).await,
            "{button} shown to read-only"
        );
    }
    browser
        .client
        .goto(&format!("{page}#/actions"))
        .await
        .unwrap();
    browser
        .text_until("#actions-need-admin", |t| t.contains("admin"))
        .await;
    for button in ["#clear-start", "#purge-start"] {
        assert!(
            !present(&browser, button).await,
            "{button} shown to read-only"
        );
    }

    // The operator deletes one item; the audit view names it.
    click(&browser, "#forget-token").await;
    type_into(&browser, "#token-input", "ops-token-0123").await;
    click(&browser, "#token-submit").await;
    browser
        .text_until("#whoami-role", |t| t == "operator")
        .await;
    browser
        .client
        .goto(&format!("{page}#/item/j1/item-0"))
        .await
        .unwrap();
    click(&browser, "#delete-one").await;
    browser
        .text_until("#confirm-text", |t| t.contains("Delete 1 items"))
        .await;
    click(&browser, "#confirm-delete").await;
    browser
        .text_until("#delete-outcome", |t| t == "1 items deleted")
        .await;
    browser
        .client
        .goto(&format!("{page}#/audit"))
        .await
        .unwrap();
    let row = browser
        .text_until("#audit-table tbody", |t| t.contains("ops"))
        .await;
    assert!(row.contains("deleted") && row.contains("j1"), "{row}");
    assert_eq!(browser.text_until(".audit-who", |_| true).await, "ops");
    assert_eq!(browser.text_until(".audit-items", |_| true).await, "1");
    browser.close().await;
    drop(server);
}

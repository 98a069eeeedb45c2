"""The memories page in a real browser: Debian's headless Chromium driven by selenium, the demo app
on a real werkzeug server in a thread, a real SQLite file.

Chromium and chromedriver come from apt (``make browser``, run by ``make test``). Without them the
test is skipped, saying why; under CI (``CI`` set) it fails instead, so it never goes missing silently.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from memo_mw import userdata
from memo_mw.demo import create_app
from memo_mw.store import Store

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 10  # seconds: generous for a loaded CI machine; a passing run waits a fraction of it


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser test (`make browser` installs chromium and chromium-driver)")
    pytest.skip(f"{reason} (`make test` installs Debian's chromium and chromium-driver with apt-get when it can)")


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed (pip install -e '.[test]')")
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        unavailable(f"{' and '.join(missing)} not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1200,900", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def demo(tmp_path):
    """(the demo app, its base URL, the database path), served by werkzeug on a free port."""
    db = str(tmp_path / "memo.db")
    app = create_app(db=db)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="demo-server", daemon=True)
    thread.start()
    yield app, f"http://127.0.0.1:{server.server_port}", db
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


def database_bytes(db: str) -> bytes:
    return b"".join(Path(db + suffix).read_bytes() for suffix in ("", "-wal", "-shm") if Path(db + suffix).exists())


def contents(db: str, user: str) -> list[str]:
    with Store(db) as store:
        return sorted(m["content"] for m in store.list(user, include_inactive=True))


def audit(db: str, user: str) -> list[tuple[str, int]]:
    with Store(db) as store:
        return [(a["action"], a["count"]) for a in store.audit(user)]


def history(db: str, user: str) -> list[str]:
    with Store(db) as store:
        return [m["text"] for m in userdata.history(store, user)]


def chat_as(app, user, message):
    """A chat request from another client, logged in as ``user`` (the demo's signed session)."""
    client = app.test_client()
    assert client.post("/login", json={"user": user}).status_code == 200
    assert client.post("/chat", json={"message": message}).status_code == 200


def test_the_page_shows_edits_and_deletes_memories(browser, demo):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.wait import WebDriverWait

    app, base, db = demo
    wait = WebDriverWait(browser, WAIT)
    # Another user's memory, which the page must never show nor touch.
    chat_as(app, "bob", "I love zanzibarian oolong")

    # The chat page: pick a user id, say three things to remember and two that go only to the chat history.
    browser.get(base + "/")
    user = browser.find_element(By.ID, "user")
    user.clear()
    user.send_keys("ana")
    message = browser.find_element(By.ID, "message")
    said = ["I like bossa nova", "from now on answer in Chinese", "I live in Berlin", "Tell me a joke about penguins",
            "What is the weather like in Lisbon"]
    for i, text in enumerate(said, start=1):
        message.send_keys(text, Keys.ENTER)
        wait.until(lambda d, i=i: len(d.find_elements(By.CSS_SELECTOR, "#log .bot")) == i)
    app.wsgi_app.queue.join()
    assert contents(db, "ana") == ["answer style: answer in Chinese", "likes bossa nova", "lives in Berlin"]

    # Its link opens the memories page, for the user typed there (the demo's signed session).
    browser.find_element(By.ID, "memories-link").click()
    wait.until(ec.presence_of_element_located((By.ID, "memories")))
    assert browser.find_element(By.TAG_NAME, "h1").text == "What is remembered about you"
    sections = browser.find_elements(By.CSS_SELECTOR, "#memories section")
    assert [s.get_attribute("data-type") for s in sections] == ["style", "preference", "fact"]
    assert [s.find_element(By.TAG_NAME, "h2").text for s in sections] == [
        "How to answer (1)", "Likes and dislikes (1)", "Facts about you (1)"]
    for section in sections:
        item = section.find_element(By.TAG_NAME, "li")
        assert item.find_element(By.TAG_NAME, "time").text[:2] == "20"  # a date, YYYY-MM-DD
    assert "zanzibarian" not in browser.page_source
    assert [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#history li .text")] == said

    # Delete one message of the chat history.
    penguins = browser.find_element(By.CSS_SELECTOR, '[aria-label="Delete message: Tell me a joke about penguins"]')
    penguins.click()
    wait.until(ec.staleness_of(penguins))
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "Deleted the message."))
    assert browser.find_element(By.ID, "heading-history").text == "Chat history (4)"
    assert history(db, "ana") == [t for t in said if "penguins" not in t] and b"penguins" not in database_bytes(db)
    assert audit(db, "ana") == [("delete_history", 1)]

    def item_of(text):
        return next(li for li in browser.find_elements(By.CSS_SELECTOR, "#memories li")
                    if li.find_element(By.CLASS_NAME, "content").text == text)

    # Delete one, from the keyboard: its Delete button, Enter.
    doomed = item_of("likes bossa nova")
    doomed.find_element(By.CSS_SELECTOR, '[aria-label="Delete: likes bossa nova"]').send_keys(Keys.ENTER)
    wait.until(ec.staleness_of(doomed))
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "Deleted: likes bossa nova"))
    assert [s.get_attribute("data-type") for s in browser.find_elements(By.CSS_SELECTOR, "#memories section")] \
        == ["style", "fact"]  # the emptied group is gone
    assert contents(db, "ana") == ["answer style: answer in Chinese", "lives in Berlin"]
    assert b"bossa nova" not in database_bytes(db)  # physically, not only from the page
    # (the message that said it leaves the chat history too, and the page's list)
    wait.until(ec.text_to_be_present_in_element((By.ID, "heading-history"), "Chat history (3)"))
    assert "I like bossa nova" not in [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#history li .text")]
    assert audit(db, "ana") == [("delete_history", 1), ("delete", 1), ("forget_history", 1)] and audit(db, "bob") == []

    # Edit a line: Edit, type, Enter; the focus is in the labelled field.
    item_of("lives in Berlin").find_element(By.CSS_SELECTOR, '[data-action="edit"]').click()
    field = browser.switch_to.active_element
    assert field.get_attribute("name") == "content"
    label = browser.find_element(By.CSS_SELECTOR, f'label[for="{field.get_attribute("id")}"]')
    assert label.text == "New text"
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("lives in Hamburg, mail me at ana@example.com", Keys.ENTER)
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "Saved, with personal data masked"))
    assert item_of("lives in Hamburg, mail me at [email]").is_displayed()
    assert contents(db, "ana") == ["answer style: answer in Chinese", "lives in Hamburg, mail me at [email]"]
    wait.until(ec.text_to_be_present_in_element((By.ID, "heading-history"), "Chat history (2)"))  # "I live in Berlin"

    # Turn the chat history off: asked to confirm (dismissed: it stays on); then it is deleted and no more is kept.
    keep = browser.find_element(By.ID, "history-enabled")
    assert keep.is_selected() and browser.find_element(By.XPATH, '//label[.//*[@id="history-enabled"]]').text \
        == "Keep my chat history"
    keep.click()
    wait.until(ec.alert_is_present()).dismiss()
    assert keep.is_selected() and len(history(db, "ana")) == 2
    keep.click()
    wait.until(ec.alert_is_present()).accept()
    wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "Your chat history is off; 2 deleted."))
    assert not keep.is_selected() and browser.find_elements(By.CSS_SELECTOR, "#history li") == []
    assert browser.find_element(By.ID, "history-empty").is_displayed()
    assert history(db, "ana") == [] and b"Lisbon" not in database_bytes(db)
    chat_as(app, "ana", "Any news about the comet")
    app.wsgi_app.queue.join()
    assert history(db, "ana") == [] and b"comet" not in database_bytes(db)
    assert history(db, "bob") == ["I love zanzibarian oolong"]

    # Delete everything: a confirmation first; Cancel keeps everything.
    browser.find_element(By.ID, "delete-all").click()
    dialog = browser.find_element(By.ID, "confirm-all")
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    assert browser.find_element(By.ID, "confirm-text").text.startswith("All your memories (2) will be deleted")
    browser.find_element(By.ID, "cancel-delete-all").click()
    wait.until(lambda d: dialog.get_attribute("open") is None)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#memories li")) == 2
    assert len(contents(db, "ana")) == 2
    # Escape closes it too, without deleting.
    browser.find_element(By.ID, "delete-all").click()
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait.until(lambda d: dialog.get_attribute("open") is None)
    assert len(contents(db, "ana")) == 2
    # Confirmed: gone, from the page and from the database; bob's memory stays.
    browser.find_element(By.ID, "delete-all").click()
    wait.until(lambda d: dialog.get_attribute("open") is not None)
    browser.find_element(By.ID, "confirm-delete-all").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "empty"), "Nothing is remembered about you."))
    assert "Deleted everything: 2 memories." in browser.find_element(By.ID, "status").text
    assert contents(db, "ana") == []
    assert contents(db, "bob") == ["likes zanzibarian oolong"]
    assert b"Hamburg" not in database_bytes(db)

    # Nothing the page did broke its content security policy or threw.
    problems = [entry["message"] for entry in browser.get_log("browser")
                if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]]  # the demo has none
    assert problems == []

    # After a reload, the server says the same.
    browser.refresh()
    wait.until(ec.presence_of_element_located((By.ID, "empty")))
    assert browser.find_elements(By.CSS_SELECTOR, "#memories li") == []
    assert not browser.find_element(By.ID, "history-enabled").is_selected()

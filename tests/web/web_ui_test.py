#!/usr/bin/env python3
"""tailord's web UI in a real browser: Debian's chromium, headless, driven by
Selenium through chromedriver, against a real tailord training with the real
tailor-runner on loopback.

The user's path, each step asserted: / leads to the sign-in dialog; a wrong
token is refused; the admin token opens the jobs page (first contentful
paint under --paint-budget ms on loopback); the submit page plans the demo
spec as it is typed (a memory bar, the decisions) and shows a bad spec's
diagnostics at line:col, one click moving the cursor there; submitting opens
the job's page, which follows the job to "succeeded" with its loss curve
and memory bars; another job is cancelled from its page; the hardware page
names the runner. No page breaks the Content-Security-Policy, nothing is
logged as an error, and the token never appears in a URL or tailord's log.
Screenshots of each page go to ARTIFACTS_DIR.

  web_ui_test.py BUILD_DIR SOURCE_DIR ARTIFACTS_DIR [--paint-budget MS]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from tailord_process import TailordProcess  # noqa: E402

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait


def http(address, path, token, method="GET", body=None, content_type=None):
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(f"http://{address}{path}", data=body, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read().decode("utf-8"))


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_dir")
    parser.add_argument("source_dir")
    parser.add_argument("artifacts_dir")
    parser.add_argument("--paint-budget", type=float, default=300.0)
    args = parser.parse_args()
    build, src, artifacts = (os.path.abspath(p) for p in (args.build_dir, args.source_dir, args.artifacts_dir))
    shutil.rmtree(artifacts, ignore_errors=True)  # only this run's screenshots
    os.makedirs(artifacts)
    work = tempfile.mkdtemp(prefix="tailor-web-")
    tailord = driver = None
    try:
        tailord = TailordProcess(build, src, work)
        address, token, log_path = tailord.address, tailord.token, tailord.log_path
        base = f"http://{address}"

        def resolved(max_steps, *sets):
            return subprocess.run(
                [os.path.join(build, "bin", "tailor"), "validate", "--resolved", "--set", f"training.max_steps={max_steps}",
                 *[a for kv in sets for a in ("--set", kv)], os.path.join(src, "configs", "examples", "tiny-cpu.yaml")],
                check=True, capture_output=True, text=True).stdout

        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1366,900", "--no-first-run", "--disable-extensions"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                                  options=options)
        downloads = os.path.join(work, "downloads")
        os.makedirs(downloads)
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
        # The pages redraw as events arrive: an element read a moment after
        # it was found may have been replaced, which is a reason to look again.
        wait = WebDriverWait(driver, 60, ignored_exceptions=[StaleElementReferenceException])
        shot = lambda name: driver.save_screenshot(os.path.join(artifacts, f"{name}.png"))

        # Sign in: a wrong token is refused, the right one opens the jobs page.
        driver.get(base + "/")
        if not driver.current_url.endswith("/ui"):
            fail(f"/ did not lead to /ui but to {driver.current_url}")
        wait.until(EC.visibility_of_element_located((By.ID, "login")))
        shot("01-sign-in")
        field = driver.find_element(By.ID, "token")
        field.send_keys("not-the-token" + Keys.ENTER)
        wait.until(EC.text_to_be_present_in_element((By.ID, "login-error"), "refused"))
        field.clear()
        field.send_keys(token + Keys.ENTER)
        wait.until(EC.invisibility_of_element_located((By.ID, "login")))
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "table[aria-label=Jobs]")))
        print("ok: signed in; a wrong token was refused")

        # Once per browser: a new tab opens signed in (the session cookie is
        # the browser's, not the tab's), and no page script can read it.
        first_tab = driver.current_window_handle
        driver.switch_to.new_window("tab")
        driver.get(base + "/ui#/jobs")
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "table[aria-label=Jobs]")))
        if driver.find_element(By.ID, "login").is_displayed():
            fail("a new tab asked to sign in again")
        if "tailor_session" in driver.execute_script("return document.cookie"):
            fail("the session cookie is readable by page scripts (not HttpOnly)")
        if token in driver.execute_script("return JSON.stringify(sessionStorage) + JSON.stringify(localStorage)"):
            fail("the page stored the token")
        driver.close()
        driver.switch_to.window(first_tab)
        print("ok: a new tab is signed in by the HttpOnly session cookie; the page keeps no token")

        # Page load: first contentful paint of a fresh load, signed in; the
        # best of five, as other tests share the cores.
        paints = []
        driver.get(base + "/ui#/jobs")
        for _ in range(5):
            driver.refresh()  # a new document: the same URL again would only be a hash change
            wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "table[aria-label=Jobs]")))
            # The entry is recorded once the frame is presented, which may
            # be a moment after the table exists.
            fcp = WebDriverWait(driver, 10).until(lambda d: d.execute_script(
                "const e = performance.getEntriesByName('first-contentful-paint'); return e.length ? e[0].startTime : null"))
            paints.append(fcp)
        best = min(paints)
        print(f"ok: first contentful paint {', '.join(f'{p:.0f}' for p in paints)} ms (budget {args.paint_budget:.0f})")
        if best > args.paint_budget:
            fail(f"first contentful paint {best:.0f} ms is over the budget of {args.paint_budget:.0f} ms")

        # Submit: a bad spec shows its diagnostics at line:col.
        driver.get(base + "/ui#/submit")
        editor = wait.until(EC.presence_of_element_located((By.ID, "spec")))

        def type_spec(text):
            # The whole spec at once (send_keys of 700 characters is slow),
            # then one real key press, so the page sees the user's input.
            driver.execute_script("arguments[0].value = arguments[1]", editor, text.rstrip("\n"))
            editor.send_keys(Keys.END, "\n")

        type_spec("apiVersion: tailor/v1\nkind: TrainingJob\nname: bad\nmodel:\n  preset: no-such-model\n")
        diagnostic = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".diagnostics li button")))
        where = diagnostic.text
        line, column = (int(x) for x in where.split(":"))
        diagnostic.click()
        cursor = driver.execute_script("return arguments[0].selectionStart", editor)
        before = editor.get_attribute("value")[:cursor]
        if before.count("\n") + 1 != line:
            fail(f"the diagnostic {where} put the cursor on line {before.count(chr(10)) + 1}")
        print(f"ok: a bad spec shows {len(driver.find_elements(By.CSS_SELECTOR, '.diagnostics li'))} diagnostics, "
              f"the first at {where}, and a click puts the cursor there")
        shot("02-submit-diagnostics")

        # Completion from the spec's schema: a key under training (Ctrl+Space,
        # then Enter), then a value the schema enumerates.
        type_spec("apiVersion: tailor/v1\nkind: TrainingJob\nname: c\ntraining:\n  global_batch_size: 16\n")
        editor.send_keys("  max_st")
        options = wait.until(lambda d: [li.text for li in d.find_elements(By.CSS_SELECTOR, "#completions li")] or None)
        if not options[0].startswith("max_steps"):
            fail(f"typing 'max_st' under training offered {options}")
        editor.send_keys(Keys.ENTER, "5\nstrategy:\n")
        editor.send_keys("  precision: ")
        editor.send_keys(Keys.CONTROL, " ")
        values = wait.until(lambda d: [li.text for li in d.find_elements(By.CSS_SELECTOR, "#completions li")] or None)
        if "bf16" not in values or "auto" not in values:
            fail(f"Ctrl+Space after 'precision: ' offered {values}")
        editor.send_keys(Keys.ARROW_DOWN, Keys.ENTER)
        text = editor.get_attribute("value")
        if "  max_steps: 5\n" not in text or f"precision: {values[1]}" not in text:
            fail(f"the completions were not inserted where they belong:\n{text}")
        # A catalog name: the daemon's schema lists its presets as examples.
        type_spec("apiVersion: tailor/v1\nkind: TrainingJob\nname: c\nmodel:\n")
        editor.send_keys("  preset: llama-2")
        editor.send_keys(Keys.CONTROL, " ")
        presets = wait.until(lambda d: [li.text for li in d.find_elements(By.CSS_SELECTOR, "#completions li")] or None)
        if "llama-2-7b" not in presets or any(not p.startswith("llama-2") for p in presets):
            fail(f"Ctrl+Space after 'preset: llama-2' offered {presets}")
        editor.send_keys(Keys.ESCAPE)
        print(f"ok: completion offers {options[0]!r} for 'max_st', {values} for 'precision: ' and {presets} for "
              "'preset: llama-2', and inserts them")
        shot("03-submit-completion")

        # The demo spec (with TensorBoard on): planned as it is typed, then submitted.
        type_spec(resolved(30, "tracking.tensorboard.dir=tb"))
        wait.until(EC.text_to_be_present_in_element((By.ID, "preview"), "Fits"))
        preview = driver.find_element(By.ID, "preview")
        if not preview.find_elements(By.CSS_SELECTOR, ".bar span") or not preview.find_elements(By.CSS_SELECTOR, "ol.decisions li"):
            fail("the plan preview has no memory bar or no decisions")
        # Its data under the plan: the first examples, the trained text marked.
        marked = wait.until(lambda d: [m.text for m in d.find_elements(By.CSS_SELECTOR, "#data-preview pre.example mark")
                                       if m.text] or None)
        if "tiny-corpus.txt:1" not in driver.find_element(By.ID, "data-preview").text:
            fail("the data preview does not name the first record")
        print("ok: the demo spec is planned as it is typed: memory bar and decisions shown; its data previewed with "
              f"{len(marked)} marked spans")
        shot("04-submit-plan-preview")
        driver.find_element(By.ID, "submit").click()
        wait.until(lambda d: "#/jobs/j-" in d.current_url)
        job_id = driver.current_url.split("#/jobs/")[1]
        long_wait = WebDriverWait(driver, 240, ignored_exceptions=[StaleElementReferenceException])
        long_wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "dd[data-state=succeeded]")))
        long_wait.until(lambda d: int(d.find_element(By.CSS_SELECTOR, "path[data-series=loss]")
                                      .get_attribute("data-points") or 0) >= 30)
        bars = driver.find_elements(By.CSS_SELECTOR, ".bar")
        if len(bars) < 2:
            fail(f"the job page shows {len(bars)} memory bars, not the estimate and the measurement")
        metrics = urllib.request.urlopen(f"http://{address}/metrics", timeout=30).read().decode()
        if 'route="/v1/jobs/{id}/events"' not in metrics or 'route="/v1/events"' not in metrics:
            fail("the job page or the jobs table did not open its event stream")
        if "this machine" not in driver.find_element(By.ID, "main").text:
            fail("the job page does not say where the job ran")
        facts = driver.find_element(By.CSS_SELECTOR, "dl.facts").text
        if "tensorboard --logdir " not in facts or "/tb" not in facts or "tailor-wandb " not in facts:
            fail(f"the job page does not say how to open its TensorBoard folder: {facts}")
        frozen = json.loads(driver.find_element(
            By.CSS_SELECTOR, "pre[aria-label=\"The job's spec as frozen at submission\"]").get_attribute("textContent"))
        if frozen.get("training", {}).get("max_steps") != 30:
            fail(f"the job page's frozen spec is not the submitted one: {frozen.get('training')}")
        print(f"ok: job {job_id} submitted through the UI succeeded, followed through its event stream; its loss "
              "curve has 30 points, memory shown estimated and measured, run on this machine, its TensorBoard and W&B "
              "commands and its frozen spec shown")
        shot("05-job-succeeded")

        # Its model downloaded from its page: saved by the browser's own
        # download manager through a link, byte for byte the job's file.
        button = wait.until(lambda d: next((b for b in d.find_elements(By.CSS_SELECTOR, "#main button.action")
                                            if b.text.startswith("Download model/")
                                            and b.text.endswith(".safetensors")), None))
        wanted = button.text[len("Download "):]
        button.click()
        saved = os.path.join(downloads, os.path.basename(wanted))
        job_file = os.path.join(tailord.data, "jobs", job_id, wanted)
        long_wait.until(lambda d: os.path.exists(saved) and os.path.getsize(saved) == os.path.getsize(job_file)
                        and not any(n.endswith(".crdownload") for n in os.listdir(downloads)))
        if open(saved, "rb").read() != open(job_file, "rb").read():
            fail(f"the downloaded {wanted} differs from the job's")
        metrics = urllib.request.urlopen(f"http://{address}/metrics", timeout=30).read().decode()
        if 'route="/v1/downloads/{link}"' not in metrics:
            fail("the download did not go through a download link")
        print(f"ok: {wanted} ({os.path.getsize(saved)} bytes) downloaded from the job page through a link, "
              "equal to the job's file")

        # The whole model/ folder as one archive: Python's tarfile reads it
        # as the job's files, byte for byte.
        button = wait.until(lambda d: next((b for b in d.find_elements(By.CSS_SELECTOR, "#main button.action")
                                            if b.text == "Download model/ as .tar"), None))
        button.click()
        archive = os.path.join(downloads, f"{job_id}-model.tar")
        long_wait.until(lambda d: os.path.exists(archive)
                        and not any(n.endswith(".crdownload") for n in os.listdir(downloads)))
        model_dir = os.path.join(tailord.data, "jobs", job_id, "model")
        expected = sorted("model/" + n for n in os.listdir(model_dir))
        with tarfile.open(archive) as tar:
            names = sorted(tar.getnames())
            if names != expected:
                fail(f"the model archive holds {names}, not {expected}")
            for name in names:
                if tar.extractfile(name).read() != open(os.path.join(model_dir, name[len("model/"):]), "rb").read():
                    fail(f"{name} in the archive differs from the job's file")
        print(f"ok: model/ downloaded as one archive ({os.path.getsize(archive)} bytes, {len(names)} files), "
              "equal to the job's folder")

        # Talking to the model from its page: the answer streams in, and it
        # is what the API gives for the same greedy request.
        prompt = driver.find_element(By.CSS_SELECTOR, "textarea[aria-label=Prompt]")
        prompt.send_keys("The ")

        def set_number(label, value):
            field = driver.find_element(By.CSS_SELECTOR, f"input[aria-label='{label}']")
            field.clear()
            field.send_keys(value)

        def page_answer():
            # The click clears the last answer and its status at once.
            driver.find_element(By.XPATH, "//button[normalize-space()='Generate']").click()
            long_wait.until(lambda d: "tokens/s" in d.find_element(By.XPATH, "//h2[.='Talk to the model']/..").text)
            return driver.find_element(By.CSS_SELECTOR, "pre[aria-label=\"The model's answer\"]").text

        def api_answer(**sampling):
            request = urllib.request.Request(
                f"http://{address}/v1/jobs/{job_id}/generate", method="POST",
                data=json.dumps({"prompt": "The ", "max_tokens": 24, "temperature": 0, **sampling}).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                stream = response.read().decode("utf-8")
            return [json.loads(line[len("data: "):]) for block in stream.split("\n\n")
                    if block.startswith("event: done") for line in block.split("\n") if line.startswith("data: ")]

        set_number("Max tokens", "24")
        answer = page_answer()
        done = api_answer()
        if len(done) != 1 or done[0]["text"].strip() != answer.strip():
            fail(f"the page's answer {answer!r} is not the API's {done!r}")
        # The sampling settings reach the request: a repetition penalty
        # gives the API's penalised answer, not the plain one.
        driver.find_element(By.XPATH, "//summary[.='Sampling']").click()
        set_number("Repetition penalty", "1.5")
        penalised = page_answer()
        penalised_done = api_answer(repetition_penalty=1.5)
        if len(penalised_done) != 1 or penalised_done[0]["text"].strip() != penalised.strip():
            fail(f"the page's answer with a repetition penalty {penalised!r} is not the API's {penalised_done!r}")
        if penalised.strip() == answer.strip():
            fail(f"a repetition penalty of 1.5 left the answer as it was: {answer!r}")
        shot("05b-talk")
        print(f"ok: the job page generated {done[0]['completion_tokens']} tokens from its model, streamed, "
              "equal to the API's answer")

        # Exporting the model from its page: a GGUF file written into the
        # job's folder, then downloaded byte for byte.
        from selenium.webdriver.support.ui import Select
        Select(driver.find_element(By.CSS_SELECTOR, "select[aria-label='Export as']")).select_by_value("gguf:f32")
        driver.find_element(By.XPATH, "//button[normalize-space()='Export']").click()
        long_wait.until(lambda d: "Wrote exports/model-f32.gguf" in
                        d.find_element(By.XPATH, "//h2[.='Export the model']/..").text)
        def download_export(name):
            """exports/NAME downloaded through its button, byte for byte the file the export wrote."""
            driver.find_element(By.XPATH, f"//button[normalize-space()='Download {name}']").click()
            saved = os.path.join(downloads, name)
            long_wait.until(lambda d: os.path.exists(saved)
                            and not any(n.endswith(".crdownload") for n in os.listdir(downloads)))
            written = os.path.join(tailord.data, "jobs", job_id, "exports", name)
            if open(saved, "rb").read() != open(written, "rb").read():
                fail(f"the downloaded {name} differs from the one the export wrote")
            return saved

        saved = download_export("model-f32.gguf")
        if open(saved, "rb").read(4) != b"GGUF":
            fail("the export is not a GGUF file")
        # Its Ollama Modelfile beside it, downloaded the same way.
        if "FROM ./model-f32.gguf\n" not in open(download_export("model-f32.Modelfile")).read():
            fail("the Modelfile does not name the GGUF file beside it")
        shot("05c-export")
        print(f"ok: the job page exported its model as GGUF ({os.path.getsize(saved)} bytes) and downloaded it "
              "with its Modelfile")

        # Cancel a running job from its page.
        other = http(address, "/v1/jobs", token, "POST", resolved(100000).encode(), "application/yaml")["id"]
        driver.get(base + f"/ui#/jobs/{other}")
        long_wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "dd[data-state=running]")))
        shot("06-job-running")
        wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Cancel']"))).click()
        long_wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "dd[data-state=cancelled]")))
        if http(address, f"/v1/jobs/{other}", token)["state"] != "cancelled":
            fail("the job the UI cancelled is not cancelled in tailord")
        print(f"ok: job {other} cancelled from its page")

        # The jobs table lists both; the hardware page names the runner.
        driver.get(base + "/ui#/jobs")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-job]")) == 2)
        shot("07-jobs")
        driver.get(base + "/ui#/hardware")
        wait.until(EC.text_to_be_present_in_element((By.ID, "main"), "tailor-runner"))
        wait.until(EC.text_to_be_present_in_element((By.ID, "main"), "not configured (tailord --executor slurm|auto)"))
        shot("08-hardware")
        print("ok: the jobs table lists both jobs; the hardware page names the runner and the Slurm executor's state")

        # Keyboard: Tab from the page reaches the navigation's links.
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
        focused = driver.switch_to.active_element
        if focused.tag_name not in ("a", "button"):
            fail(f"Tab focused a {focused.tag_name}, not a link or button")

        # What the steps above provoke on purpose: the wrong token's 401 and
        # the bad spec's 400. Anything else (a script error, a refused
        # resource, a Content-Security-Policy violation) fails.
        expected = (f"{base}/v1/session - Failed to load resource: the server responded with a status of 401",
                    f"{base}/v1/jobs?dry_run=true - Failed to load resource: the server responded with a status of 400")
        problems = [e for e in driver.get_log("browser")
                    if e["level"] in ("SEVERE", "WARNING") and not e["message"].startswith(expected)]
        if problems:
            fail("the browser logged: " + "; ".join(e["message"] for e in problems))
        if token in open(log_path).read():
            fail("the token is in tailord's log")
        print(f"web ui: ok (screenshots in {artifacts})")
    finally:
        if driver:
            driver.quit()
        if tailord:
            tailord.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

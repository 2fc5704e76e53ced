#!/usr/bin/env python3
"""Plays a video from a Cachet node's HTTP port in headless Chromium and reports what the page saw.

    play-video.py URL [--timeout SECONDS]

URL is a page (stored in the cache itself) whose <video id="clip"> reads the video from the same node. The
script loads it, waits until the video knows its duration, plays it, seeks to the middle and plays from
there (a seek takes HTTP range requests), and prints one JSON object: the duration, the time reached before
the seek, the time reached after it, and any media error. Exits 0 when all of that happened, 1 otherwise.
Everything is read through the page (the <video> element's own state), never from the node.
Needs chromium, chromium-driver and python3-selenium (Debian packages).
"""

import argparse
import json
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--timeout", type=float, default=30)
    args = parser.parse_args()

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--autoplay-policy=no-user-gesture-required", "--mute-audio"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    result = {"duration": None, "before_seek": None, "seek_target": None, "after_seek": None, "error": None,
              "seeked": False}
    deadline = time.time() + args.timeout

    def video(expression):
        return driver.execute_script("const v = document.getElementById('clip'); return " + expression + ";")

    def wait(condition, what):
        while time.time() < deadline:
            error = video("v.error ? (v.error.code + ': ' + v.error.message) : null")
            if error:
                result["error"] = error
                return False
            if condition():
                return True
            time.sleep(0.05)
        result["error"] = "timed out waiting for " + what
        return False

    try:
        driver.get(args.url)
        ok = wait(lambda: video("v.readyState >= 1 && isFinite(v.duration) && v.duration > 0"), "the duration")
        if ok:
            result["duration"] = video("v.duration")
            video("(v.play(), true)")
            ok = wait(lambda: video("v.currentTime") > 0.5, "playback")
            result["before_seek"] = video("v.currentTime")
        if ok:
            target = result["duration"] / 2
            result["seek_target"] = target
            driver.execute_script(
                "const v = document.getElementById('clip'); window.seekedOnce = false;"
                "v.addEventListener('seeked', () => { window.seekedOnce = true; }, {once: true});"
                "v.currentTime = arguments[0]; v.play();", target)
            ok = wait(lambda: driver.execute_script("return window.seekedOnce"), "the seek")
            result["seeked"] = ok
        if ok:
            ok = wait(lambda: video("v.currentTime") > result["seek_target"] + 0.5, "playback after the seek")
            result["after_seek"] = video("v.currentTime")
    finally:
        driver.quit()
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

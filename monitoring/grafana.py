"""``testbed dashboards push``: uploads the generated dashboards to a Grafana with grafana-client (the
maintained fork of grafana-api), into a folder, overwriting earlier versions (dashboard uids are stable)."""

from __future__ import annotations

from testbed.monitoring.dashboards import build_all

FOLDER_UID = "testbed"


def push(url: str, token: str, folder: str = "testbed", timeout: float = 10.0) -> list[dict]:
    """Returns Grafana's answer for each dashboard ({"uid", "url", "status", ...})."""
    from grafana_client import GrafanaApi
    from grafana_client.client import TokenAuth

    api = GrafanaApi.from_url(url, credential=TokenAuth(token), timeout=timeout)
    existing = next((f for f in api.folder.get_all_folders() if f.get("title") == folder), None)
    if existing is None:
        uid = FOLDER_UID if folder == "testbed" else None
        existing = api.folder.create_folder(folder, uid=uid)
    answers = []
    for d in build_all().values():
        body = {
            "dashboard": {**d, "id": None},
            "folderUid": existing["uid"],
            "overwrite": True,
            "message": "testbed dashboards push",
        }
        answers.append(api.dashboard.update_dashboard(body))
    return answers

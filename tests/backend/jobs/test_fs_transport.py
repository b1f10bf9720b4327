"""The embedded broker: messages appear in the queue folder only once complete."""

from __future__ import annotations

from kombu import Connection

from backend.jobs import fs_transport


def connect(folder):
    """A connection on the queue `folder` with its control folder beside it (kombu's
    default control folder is `control/` in the working directory)."""
    fs_transport.register()
    control = folder.with_name(folder.name + "-control")
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder), "control_folder": str(control)}
    return Connection("rlvrfs://", transport_options=options)


def queue_name(tmp_path) -> str:
    # kombu remembers declared exchanges per process, so each test binds a queue of its own
    return "jobs-" + tmp_path.name


def test_nothing_is_written_outside_the_given_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    queue_dir = tmp_path / "queue"
    queue_dir.mkdir()
    with connect(queue_dir) as conn:
        queue = conn.SimpleQueue(queue_name(tmp_path))
        queue.put({"job": 1})
        queue.get(timeout=2).ack()
        queue.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queue", "queue-control"]


def test_put_is_atomic_and_half_written_files_are_ignored(tmp_path):
    with connect(tmp_path) as conn:
        queue = conn.SimpleQueue(queue_name(tmp_path))
        # A message still being written (the name a producer writes under) is not taken.
        (tmp_path / f"1_x.{queue.queue.name}.msg.part").write_bytes(b"")
        queue.put({"job": 1})
        names = sorted(p.name for p in tmp_path.iterdir())
        assert [n for n in names if n.endswith(".msg")], names
        assert not [n for n in names if n.endswith(".part") and not n.startswith("1_x")], names
        message = queue.get(timeout=2)
        assert message.payload == {"job": 1}
        message.ack()
        assert queue.qsize() == 0
        queue.close()


def test_message_file_is_complete_before_it_gets_its_queue_name(tmp_path, monkeypatch):
    seen = []
    real_replace = fs_transport.os.replace

    def spying_replace(src, dst):
        # At the moment of the rename, no file of this queue exists yet and the payload is whole.
        seen.append(([p.name for p in tmp_path.iterdir() if p.name.endswith(".msg")], open(src, "rb").read()))
        real_replace(src, dst)

    monkeypatch.setattr(fs_transport.os, "replace", spying_replace)
    with connect(tmp_path) as conn:
        queue = conn.SimpleQueue(queue_name(tmp_path))
        queue.put({"job": 2, "pad": "x" * 10_000})
        assert len(seen) == 1
        visible_before, payload = seen[0]
        assert visible_before == []
        assert len(payload) > 10_000 and payload.rstrip().endswith(b"}")  # body is base64
        assert queue.get(timeout=2).payload["job"] == 2
        queue.close()

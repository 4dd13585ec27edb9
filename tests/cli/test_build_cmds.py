"""``streamflow build``: the context's file selection, the extras, the commands, the errors.

Both builds: an application's (BLUEPRINT) and the operator's (--operator, the
streamflow image alone).

Fast: nothing here builds an image (tests/images/test_app_image.py does).
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from streamflow.blueprint import verify_file
from streamflow.cli.images import builders, context, plans, wheels
from streamflow.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
WINE = ROOT / "blueprints" / "wine"


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        (".venv/bin/python", True),
        ("tools/k8s/bin/kubelet", True),
        ("bench/results/x.json", True),
        ("web/node_modules/x/index.js", True),
        ("blueprints/wine/__pycache__/wine_app.cpython-311.pyc", True),
        (".git/HEAD", True),
        ("blueprints/wine/models/wine-v1.keras", False),
        ("blueprints/wine/models/wine-sample.jsonl", False),
        ("blueprints/wine/classifier_app.py", False),
        ("schemas/examples/wine.avsc", False),
        ("pyproject.toml", False),
    ],
)
def test_the_repository_dockerignore(rel: str, expected: bool) -> None:
    assert context.ignored(rel, context.read_ignore(ROOT)) is expected


def test_ignore_rules_follow_docker() -> None:
    patterns = ["*.log", "data/**/*.tmp", "models", "!models/keep.bin"]
    assert context.ignored("x.log", patterns)
    assert not context.ignored("sub/x.log", patterns)  # * stays in one directory
    assert context.ignored("data/a/b/c.tmp", patterns)
    assert context.ignored("data/c.tmp", patterns)
    assert context.ignored("models/other.bin", patterns)  # a directory takes its files
    assert not context.ignored("models/keep.bin", patterns)  # the last match wins


def test_project_files_prune_ignored_directories(tmp_path: Path) -> None:
    (tmp_path / ".dockerignore").write_text("# comment\n.venv/\n*.pyc\n")
    for rel in ("app.py", "x.pyc", ".venv/lib/big.so", "models/m.keras"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    found = context.project_files(tmp_path, context.read_ignore(tmp_path))
    assert found == [".dockerignore", "app.py", "models/m.keras"]


def test_the_wine_classifier_needs_tensorflow() -> None:
    result = verify_file(WINE / "classifier.yaml", require_registry=False)
    assert result.application is not None
    extras = context.needed_extras(result.application)
    assert list(extras) == ["tf"]
    assert "keras" in extras["tf"]


def test_the_simple_wine_app_needs_no_extra() -> None:
    result = verify_file(WINE / "blueprint.yaml", require_registry=False)
    assert result.application is not None
    assert context.needed_extras(result.application) == {}


def test_buildahs_storage_driver_is_chosen_and_each_has_its_own_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(builders.DRIVER_ENV, "overlay")
    assert builders.storage_driver(tmp_path) == "overlay"
    overlay = builders.Builder("buildah", "/usr/bin/buildah", tmp_path, "overlay")
    assert overlay.base()[1:] == [
        "--root", f"{tmp_path}/storage-overlay", "--runroot", f"{tmp_path}/run-overlay",
        "--storage-driver", "overlay",
    ]  # fmt: skip
    monkeypatch.setenv(builders.DRIVER_ENV, "vfs")
    assert builders.storage_driver(tmp_path) == "vfs"
    monkeypatch.setenv(builders.DRIVER_ENV, "btrfs")
    with pytest.raises(typer.Exit):  # with the drivers it takes, on stderr
        builders.storage_driver(tmp_path)
    monkeypatch.delenv(builders.DRIVER_ENV)
    # chosen by a trial mount: overlay only where one works (as root, not on an overlayfs)
    assert builders.storage_driver(tmp_path) in builders.DRIVERS
    if os.geteuid() != 0:
        assert builders.storage_driver(tmp_path) == "vfs"
    assert not list(tmp_path.glob(".overlay-probe-*"))  # the trial leaves nothing


def test_builder_commands(tmp_path: Path) -> None:
    buildah = builders.Builder("buildah", "/usr/bin/buildah", tmp_path)
    command = buildah.build(dockerfile=Path("D"), context=Path("C"), tags=["t:1"], args={"A": "b"})
    assert command[:7] == [
        "/usr/bin/buildah",
        "--root",
        f"{tmp_path}/storage",
        "--runroot",
        f"{tmp_path}/run",
        "--storage-driver",
        "vfs",
    ]
    assert command[7:] == [
        "bud",
        "--isolation",
        "chroot",
        "-f",
        "D",
        "--build-arg",
        "A=b",
        "-t",
        "t:1",
        "C",
    ]
    assert buildah.push("reg/a:1")[:7] == command[:7]  # the same storage
    assert buildah.push("reg/a:1")[7:] == ["push", "reg/a:1", "docker://reg/a:1"]
    assert builders.Builder("podman", "podman").push("r:1") == ["podman", "push", "r:1"]
    assert buildah.save("t:1", "oci-archive", Path("/o.tar"))[-3:] == [
        "push",
        "t:1",
        "oci-archive:/o.tar:t:1",
    ]
    docker = builders.Builder("docker", "docker")
    assert docker.build(dockerfile=Path("D"), context=Path("C"), tags=["t"], args={}) == [
        "docker",
        "build",
        "-f",
        "D",
        "-t",
        "t",
        "C",
    ]


def test_dry_run_prints_the_plan_and_commands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STREAMFLOW_IMAGES_DIR", str(tmp_path))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\nexit 1\n")  # no image exists
    (fake / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    result = CliRunner().invoke(
        app, ["build", str(WINE / "classifier.yaml"), "--builder", "docker", "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "streamflow/cli/images/Dockerfile.streamlets" in result.stdout
    assert "--build-arg STREAMFLOW_IMAGE=localhost/streamflow:0.1.0-" in result.output
    assert "-t localhost/streamflow/wine-classifier:" in result.output
    assert "BASE_IMAGE=docker.io/library/python:3.11-slim" in result.output
    # what to pass to operator manifests --image: the image the application builds on
    assert "operator manifests --image): localhost/streamflow:0.1.0-" in result.stderr
    assert not (tmp_path / "contexts").exists()  # a dry run writes nothing


def test_the_tag_is_a_content_hash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    builder = builders.Builder("docker", "/nonexistent/docker")
    monkeypatch.setattr(builders, "has_image", lambda b, i: False)
    monkeypatch.setattr(builders, "image_id", lambda b, i: "")
    project = tmp_path / "proj"
    (project / "bp").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname='p'\n")
    for name in ("blueprint.yaml", "wine_app.py"):
        (project / "bp" / name).write_text((WINE / name).read_text())
    shutil.copytree(ROOT / "schemas" / "examples" / "wine", project / "schemas" / "wine")

    def plan() -> plans.Plan:
        return plans.make_plan(
            project / "bp" / "blueprint.yaml",
            root=None,
            tag=None,
            base_image="b",
            builder=builder,
            extras=None,
        )

    first = plan()
    assert first.application is not None
    assert first.application.root == project and first.application.extras == {}
    assert plan().reference == first.reference == first.application.image
    (project / "bp" / "wine_app.py").write_text((WINE / "wine_app.py").read_text() + "\n# x\n")
    assert plan().reference != first.reference
    assert plan().streamflow == first.streamflow
    operator = plans.plan_operator(tag=None, base_image="b", builder=builder)
    assert operator.application is None and operator.reference == first.streamflow.image
    assert operator.requirements == ["streamflow[k8s]"]


def test_no_builder_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(app, ["build", str(WINE / "classifier.yaml"), "--dry-run"])
    assert result.exit_code == 1
    assert "apt-get install buildah" in result.output


def test_bad_output_and_builder_are_usage_errors() -> None:
    blueprint = str(WINE / "classifier.yaml")
    for args in (["--output", "tar:/x"], ["--builder", "kaniko"]):
        result = CliRunner().invoke(app, ["build", blueprint, *args])
        assert result.exit_code == 2, result.output


def test_build_is_in_the_help() -> None:
    result = CliRunner().invoke(app, ["build", "--help"])
    assert result.exit_code == 0
    assert "--dry-run" in result.output and "oci-archive" in result.output


# -- the operator's image (--operator) ------------------------------------------

FAKE_DOCKER = """#!/bin/sh
echo "$*" >>"$FAKE_LOG"
case "$1 $2" in
  "image inspect") [ -n "$FAKE_EXISTS" ] || exit 1; echo sha256:abc ;;
  "save -o") echo archive >"$3" ;;
  "build -f") echo "STEP 1/8: FROM base" ;;
  "push "*) [ -z "$FAKE_PUSH_FAILS" ] || { echo "denied: access refused" >&2; exit 1; } ;;
esac
exit 0
"""


@pytest.fixture
def fake_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A docker on PATH that logs its command lines; its images exist when FAKE_EXISTS is set."""
    monkeypatch.setenv("STREAMFLOW_IMAGES_DIR", str(tmp_path / "images"))
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(FAKE_DOCKER)
    (fake / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    log = tmp_path / "docker.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def test_the_dockerfiles_are_package_data() -> None:
    # a plain pip install builds too: the Dockerfiles are not in a checkout only
    package = importlib.resources.files("streamflow.cli.images")
    for name in ("Dockerfile", "Dockerfile.streamlets"):
        assert package.joinpath(name).is_file()
    assert plans.STREAMFLOW_DOCKERFILE.read_text().startswith("# syntax=docker/dockerfile:1")


def test_operator_dry_run_builds_the_streamflow_image_alone(fake_docker: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "build",
            "--operator",
            "--builder",
            "docker",
            "--base-image",
            "my/base:1",
            "--tag",
            "reg/sf:1",
            "--output",
            "docker-archive:/x/sf.tar",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "# streamflow image" in out and "application image" not in out
    assert "streamflow/cli/images/Dockerfile " in out and "--build-arg BASE_IMAGE=my/base:1" in out
    assert "-t localhost/streamflow:0.1.0-" in out and "-t localhost/streamflow:0.1.0 " in out
    assert "# tag\n" in out and out.split("# tag\n")[1].split("\n")[0].endswith(" reg/sf:1")
    assert "save -o /x/sf.tar reg/sf:1" in out
    assert "operator manifests --image): localhost/streamflow:0.1.0-" in result.stderr
    assert not fake_docker.read_text().count(" build ")  # nothing built


def test_operator_prints_its_reference_and_writes_the_archive(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_EXISTS", "1")  # up to date: no wheel is made, nothing is built
    result = CliRunner().invoke(app, ["build", "--operator", "--builder", "docker"])
    assert result.exit_code == 0, result.output
    content_tag = result.stdout.strip()
    assert content_tag.startswith("localhost/streamflow:0.1.0-") and len(content_tag) == 39
    assert "is up to date" in result.stderr

    archive = tmp_path / "out" / "sf.tar"
    args = ["--tag", "reg/sf:1", "--output", f"docker-archive:{archive}"]
    result = CliRunner().invoke(app, ["build", "--operator", "--builder", "docker", *args])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "reg/sf:1"
    assert archive.read_text() == "archive\n"
    log = fake_docker.read_text()
    assert f"tag {content_tag} reg/sf:1" in log and " build " not in log


def test_operator_rebuild_builds_again(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_EXISTS", "1")
    house = tmp_path / "house"
    house.mkdir()
    (house / "streamflow-0.1.0-py3-none-any.whl").write_text("wheel")
    made: list[list[str]] = []

    def wheelhouse(source: Path | None, requirements: list[str], key: wheels.Keys) -> list[Path]:
        made.append(requirements)
        return [house / "streamflow-0.1.0-py3-none-any.whl"]

    monkeypatch.setattr(wheels, "wheelhouse", wheelhouse)
    result = CliRunner().invoke(app, ["build", "--operator", "--builder", "docker", "--rebuild"])
    assert result.exit_code == 0, result.output
    assert made == [["streamflow[k8s]"]]
    builds = [line for line in fake_docker.read_text().splitlines() if line.startswith("build ")]
    # every image "exists" here, the local base too, so it is the one chosen
    assert len(builds) == 1 and "BASE_IMAGE=localhost/streamflow-base:bookworm" in builds[0]
    assert not (tmp_path / "images" / "contexts" / "_operator").exists()  # removed after


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a BLUEPRINT"),
        ([str(WINE / "classifier.yaml"), "--operator"], "not both"),
        (["--operator", "--extras", "tf"], "--extras apply to an application's image"),
        (["--operator", "--root", str(ROOT)], "--root apply to an application's image"),
    ],
)
def test_operator_or_blueprint_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["build", *args, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())


def test_without_a_checkout_streamflow_comes_from_the_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STREAMFLOW_IMAGES_DIR", str(tmp_path))
    ran: list[list[str]] = []

    def run(command: list[str], *, what: str, quiet: bool = False, hint: str = "") -> None:
        ran.append(command)
        flag = "--wheel-dir" if "--wheel-dir" in command else "--dest"
        Path(command[command.index(flag) + 1]).mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(builders, "run", run)
    requirements = ["streamflow[k8s,tf]", "pandas>=2"]
    key = wheels.keys(None, requirements, content="c" * 64)
    assert key.own is None
    wheels.wheelhouse(None, requirements, key)
    assert (tmp_path / "wheels" / f"deps-{key.deps}" / ".complete").is_file()
    assert len(ran) == 1  # no wheel built from a checkout
    assert ran[0][-2:] == ["streamflow[k8s,tf]==0.1.0", "pandas>=2"]
    assert wheels.streamflow_source() == ROOT  # here, an editable install: the checkout's wheel


def test_stdout_is_the_reference_alone(fake_docker: Path, tmp_path: Path) -> None:
    # IMAGE=$(streamflow build ...) works: the builder's own output goes to stderr
    builder = builders.find_builder("docker", storage=tmp_path)
    plan = plans.plan_operator(tag=None, base_image=None, builder=builder)
    key = plan.wheels_key
    for made in (f"streamflow-{key.own}", f"deps-{key.deps}"):  # made: no pip
        house = builders.images_dir() / "wheels" / made
        house.mkdir(parents=True)
        (house / ".complete").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "streamflow.cli.main", "build", "--operator", "--builder", "docker"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == plan.reference + "\n"
    assert "STEP 1/8: FROM base" in result.stderr


def test_push_pushes_the_tag_with_the_builder(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EXISTS", "1")
    args = ["build", "--operator", "--builder", "docker", "--tag", "reg:5000/sf:1", "--push"]
    result = CliRunner().invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    pushed = result.stdout.split("# push\n")[1].splitlines()[0]
    assert pushed.endswith("/docker push reg:5000/sf:1")
    assert "push" not in fake_docker.read_text()  # a dry run pushes nothing

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == "reg:5000/sf:1\n"
    assert "pushed reg:5000/sf:1" in result.stderr
    assert fake_docker.read_text().splitlines()[-1] == "push reg:5000/sf:1"


def test_a_failed_push_says_why(fake_docker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXISTS", "1")
    monkeypatch.setenv("FAKE_PUSH_FAILS", "1")
    result = CliRunner().invoke(app, ["build", "--operator", "--builder", "docker", "--push"])
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert "failed (exit 1): denied: access refused" in message
    assert "docker login" in message and "Traceback" not in result.output


def test_another_root_than_deploys_is_warned_about(fake_docker: Path) -> None:
    # deploy has no --root: it names the blueprint's directory from the nearest project root
    blueprint = str(WINE / "classifier.yaml")
    args = ["build", blueprint, "--builder", "docker", "--dry-run", "--root"]
    result = CliRunner().invoke(app, [*args, str(ROOT / "blueprints")])
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert f"is not the project deploy uses ({ROOT}," in warning
    assert "pods would run in /app/blueprints/wine, not /app/wine" in warning
    result = CliRunner().invoke(app, [*args, str(ROOT)])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


def test_an_edit_remakes_streamflows_wheel_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STREAMFLOW_IMAGES_DIR", str(tmp_path))
    ran: list[list[str]] = []

    def run(command: list[str], *, what: str, quiet: bool = False, hint: str = "") -> None:
        ran.append(command)
        where = Path(command[command.index("--wheel-dir") + 1])
        (where / "streamflow-0.1.0-py3-none-any.whl").write_text("copied or built")
        if what == "wheels":
            (where / "tensorflow-2-cp311-none-any.whl").write_text("big")

    monkeypatch.setattr(builders, "run", run)
    monkeypatch.setattr(wheels, "TARGET_PYTHON", sys.version_info[:2])
    monkeypatch.setattr(sys, "platform", "linux")
    old = tmp_path / "wheels" / "0123456789abcdef"  # the one-directory kind: superseded
    old.mkdir(parents=True)
    requirements = ["streamflow[k8s,tf]"]
    first = wheels.keys(ROOT, requirements, content="a" * 64)
    found = wheels.wheelhouse(ROOT, requirements, first)
    assert [w.name for w in found] == [
        "streamflow-0.1.0-py3-none-any.whl",
        "tensorflow-2-cp311-none-any.whl",
    ]
    assert found[0].read_text() == "copied or built" and len(ran) == 2
    assert not (found[1].parent / found[0].name).exists()  # only in its own directory
    assert not old.exists()

    edited = wheels.keys(ROOT, requirements, content="b" * 64)
    assert edited.deps == first.deps and edited.own != first.own
    wheels.wheelhouse(ROOT, requirements, edited)
    assert [c[c.index("wheel") + 1] for c in ran[2:]] == ["--no-deps"]  # no TensorFlow again
    left = sorted(p.name for p in (tmp_path / "wheels").iterdir())
    assert left == [f"deps-{first.deps}", f"streamflow-{edited.own}"]  # the superseded one went
    assert wheels.keys(ROOT, ["streamflow[k8s]"], content="b" * 64).deps != first.deps


def test_two_builds_making_the_same_wheels_at_once_both_get_them(tmp_path: Path) -> None:
    """Two `streamflow build`s on one machine (two CI jobs, two terminals) made the same
    wheel directory at once: the second removed the first's half-made one under it, and
    the first failed with NotADirectoryError (seen when the suite ran in parallel)."""
    house = tmp_path / "wheels" / "deps-0123"

    def other_build(into: Path) -> None:
        (into / "numpy.whl").write_text("the other build's")

    def this_build(into: Path) -> None:
        (into / "numpy.whl").write_text("this build's")
        wheels._made(house, other_build)  # the other build starts and finishes meanwhile

    assert wheels._made(house, this_build) == house
    assert (house / ".complete").is_file() and (house / "numpy.whl").read_text()
    assert [p.name for p in house.parent.iterdir()] == ["deps-0123"]  # no temporary left


def test_a_failed_build_leaves_no_context(
    fake_docker: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    house = tmp_path / "house"
    house.mkdir()
    (house / "streamflow-0.1.0-py3-none-any.whl").write_text("wheel")
    monkeypatch.setattr(
        wheels, "wheelhouse", lambda *a: [house / "streamflow-0.1.0-py3-none-any.whl"]
    )
    failing = FAKE_DOCKER.replace('echo "STEP 1/8: FROM base" ;;', "exit 3 ;;")
    (tmp_path / "bin" / "docker").write_text(failing)
    result = CliRunner().invoke(app, ["build", "--operator", "--builder", "docker"])
    assert result.exit_code == 1 and "streamflow image failed (exit 3)" in result.stderr
    assert not (tmp_path / "images" / "contexts" / "_operator").exists()


# -- what a project's files may carry into /app -------------------------------------------


def _touch(root: Path, *rels: str) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")


def test_without_a_dockerignore_secrets_and_version_control_stay_out(tmp_path: Path) -> None:
    """``.git/config`` (a token in a remote URL) and ``.env`` went into /app."""
    _touch(
        tmp_path,
        "app.py",
        "models/m.keras",
        ".env",
        "deploy/.env.production",
        ".git/config",
        "tls/server.pem",
        ".venv/lib/big.so",
        "pkg/__pycache__/m.cpython-311.pyc",
    )
    patterns = context.read_ignore(tmp_path)
    assert patterns == context.DEFAULT_IGNORE
    assert context.project_files(tmp_path, patterns) == ["app.py", "models/m.keras"]
    # a project's own .dockerignore is its own choice, as with Docker
    (tmp_path / ".dockerignore").write_text(".git\n")
    assert ".env" in context.project_files(tmp_path, context.read_ignore(tmp_path))


def test_links_that_lead_out_of_the_project_are_never_followed(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    _touch(project, "app.py")
    _touch(elsewhere, "id_rsa", "etc/passwd")
    (project / "inside").symlink_to("app.py")
    (project / "key").symlink_to(elsewhere / "id_rsa")
    (project / "etc").symlink_to(elsewhere / "etc")
    (project / "up").symlink_to("../elsewhere/id_rsa")
    files, outside = context.select(project, [])
    assert files == ["app.py", "inside"]
    assert outside == ["etc", "key", "up"]


def test_build_warns_of_the_links_it_leaves_out(fake_docker: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(WINE, project / "wine", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "schemas", project / "schemas")
    (project / "pyproject.toml").write_text('[project]\nname = "wine"\nversion = "1"\n')
    _touch(tmp_path, "secret.txt")
    (project / "wine" / "secret.txt").symlink_to(tmp_path / "secret.txt")
    blueprint = str(project / "wine" / "blueprint.yaml")
    args = ["build", blueprint, "--builder", "docker", "--dry-run", "--root", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    warning = " ".join(result.stderr.split())
    assert "not copied to /app: wine/secret.txt: a link that leads out of" in warning

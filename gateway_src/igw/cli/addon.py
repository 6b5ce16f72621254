"""``igw addon``: the gateway as an EKS add-on (versions, create, update, delete, package)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from igw.cli.arg_types import (
    ADDON_WAIT,
    addon_version,
    ecr_namespace,
    eks_cluster_name,
    iam_role_arn,
    kubernetes_version,
    output_directory,
    region_name,
)
from igw.cli.option_scope import refuse_given
from igw.redaction import redact_value

HELP = "Manage the inference gateway EKS add-on: versions, create, update, delete, package."
EXIT_FAILED = 1
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="addon_command", metavar="ACTION", required=True)
    text = "list published add-on versions, newest first"
    versions = sub.add_parser("versions", help=text, description=text)
    versions.add_argument(
        "--kubernetes-version", type=kubernetes_version, help="only versions compatible with this EKS version"
    )
    versions.add_argument("--addon-name", help="add-on to list (default: ours)")
    versions.add_argument(
        "--check-pins",
        action="store_true",
        help="check every add-on version the CDK app pins against DescribeAddonVersions for "
        "--kubernetes-version (default: the pinned Kubernetes version); exit 1 if one is unpublished",
    )
    _aws_options(versions)

    for name, text in (
        ("create", "install the add-on after local and read-only pre-checks"),
        ("update", "change the add-on's version or configuration values"),
    ):
        action = sub.add_parser(name, help=text, description=text)
        action.add_argument("--cluster", type=eks_cluster_name, required=True, help="EKS cluster name")
        action.add_argument(
            "--configuration-values",
            metavar="VALUES",
            help="configuration values as `aws eks create-addon` takes them: inline JSON or YAML, "
            "or file://PATH; a plain PATH of a JSON or YAML file also works",
        )
        action.add_argument(
            "--version",
            type=addon_version,
            help="add-on version (default: "
            + ("the one this igw pins)" if name == "create" else "the installed one, unchanged)"),
        )
        # CreateAddon refuses PRESERVE ("Resolve conflicts option preserve is not supported for
        # operation CreateAddon", InvalidParameterException): offered for update only
        action.add_argument(
            "--resolve-conflicts",
            choices=("OVERWRITE", "NONE", "PRESERVE") if name == "update" else ("OVERWRITE", "NONE"),
            default="OVERWRITE",
            help="fields changed in the cluster: OVERWRITE them with the add-on's (this command's default), "
            "NONE: fail on a conflict (what EKS does when `aws eks` sends no value)"
            + (", PRESERVE: keep them" if name == "update" else "; PRESERVE is update only"),
        )
        action.add_argument("--no-wait", action="store_true", help="return once EKS accepted the request")
        action.add_argument(
            "--timeout", type=ADDON_WAIT, default=900.0, help="seconds to wait for ACTIVE (default 900)"
        )
        _aws_options(action)
        if name == "create":
            action.add_argument(
                "--role-arn",
                type=iam_role_arn,
                help="an IAM role for the chart's gateway service account (mode: gateway only)",
            )
            action.add_argument(
                "--identity",
                choices=("pod-identity", "irsa"),
                default="pod-identity",
                help="how the add-on's pods get their AWS role (default pod-identity)",
            )

    delete = sub.add_parser("delete", help="remove the add-on", description="remove the add-on")
    delete.add_argument("--cluster", type=eks_cluster_name, required=True, help="EKS cluster name")
    delete.add_argument("--preserve", action="store_true", help="keep its Kubernetes resources running")
    delete.add_argument(
        "--allow-config-deletion",
        action="store_true",
        help="delete without --preserve even though removing the InferenceGatewayConfig CRD would delete "
        "every InferenceGatewayConfig and its gateway (refused otherwise)",
    )
    delete.add_argument("--no-wait", action="store_true", help="return once EKS accepted the request")
    delete.add_argument(
        "--timeout",
        type=ADDON_WAIT,
        default=900.0,
        help="seconds to wait for the add-on to be gone (default 900)",
    )
    _aws_options(delete)

    text = "package the chart as a .tgz (with its configuration schema) through Helm's SDK"
    package = sub.add_parser("package", help=text, description=text)
    package.add_argument(
        "--destination", type=output_directory, default=Path("dist"), help="output directory (default dist)"
    )
    package.add_argument(
        "--push", action="store_true", help="push it to this account's ECR as an OCI artifact"
    )
    package.add_argument(
        "--namespace",
        type=ecr_namespace,
        default="igw-charts",
        help="ECR repository namespace (default igw-charts)",
    )
    _aws_options(package)


def _aws_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--region", type=region_name, help="AWS region (default: from the environment/profile)"
    )
    parser.add_argument("--profile", help="AWS profile")


def _clients(args: argparse.Namespace) -> object:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    import boto3

    from igw.addon.eks_api import EksAddonApi
    from igw.addon.operations import AwsClients

    session = boto3.Session(region_name=args.region, profile_name=args.profile)
    return AwsClients(
        addons=EksAddonApi(session.client("eks")), eks=session.client("eks"), iam=session.client("iam")
    )


def _package(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.addon import publish

    ecr = None
    if args.push:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        import boto3

        ecr = boto3.Session(region_name=args.region, profile_name=args.profile).client("ecr")
    try:
        published = publish.publish(destination=args.destination, ecr=ecr, namespace=args.namespace)
    except publish.PublishError as exc:
        print(f"igw addon package: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(published.archive)
    print(published.schema)
    if published.reference:
        print(published.reference)
    return 0


def _versions(args: argparse.Namespace, addons: object) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.addon import operations, pin_check, pins
    from igw.addon.eks_api import EksAddonApi

    assert isinstance(addons, EksAddonApi)
    if args.check_pins:
        kubernetes = args.kubernetes_version or pins.KUBERNETES_VERSION
        statuses = pin_check.check_pins(
            pins.pinned_addons(),
            lambda name: addons.addon_versions(name=name, kubernetes_version=kubernetes),
            kubernetes_version=kubernetes,
        )
        for status in statuses:
            print(f"{status.verdict.upper():<12}{status.message}")
        return EXIT_FAILED if any(s.verdict == "unpublished" for s in statuses) else 0
    name = args.addon_name or pins.IGW_ADDON_NAME
    versions = addons.addon_versions(name=name, kubernetes_version=args.kubernetes_version)
    if not versions:
        # EKS can answer for an add-on it does not offer here (a misspelt name, a region without it) with an
        # empty list, not an error: printing nothing and exiting 0 read as "the command worked"
        kubernetes = f" for Kubernetes {args.kubernetes_version}" if args.kubernetes_version else ""
        print(f"igw addon: no version of {name} is published{kubernetes} in {addons.region}", file=sys.stderr)
        return EXIT_FAILED
    for item in operations.sorted_versions(versions):
        clusters = ", ".join(c.get("clusterVersion", "?") for c in item.get("compatibilities", []))
        print(f"{item.get('addonVersion')}\t{clusters}")
    return 0


FILE_PREFIX: Final = "file://"
INLINE: Final = "--configuration-values (inline)"


def _inline(value: str) -> bool:
    """Whether ``--configuration-values`` holds the values themselves rather than naming a file: JSON
    (an object, or an array, refused as values with that reason rather than looked for as a file),
    or YAML of more than one line or with a ``key: value`` in it (a file name has neither)."""
    text = value.strip()
    return text.startswith(("{", "[")) or "\n" in text or ": " in text


def _names_a_file(value: str) -> bool:
    """Whether ``value`` is the path of an existing file; ``False`` for values no path can be (a
    component over the file system's name limit, a NUL byte): a long inline document is not a path."""
    try:
        return Path(value).is_file()
    except (OSError, ValueError):
        return False


def _values_text(value: str) -> str:
    """The configuration values ``--configuration-values`` gives (``OSError`` for a file it cannot read).

    As ``aws eks create-addon --configuration-values`` takes them - the values inline, or
    ``file://PATH`` - so that its documented commands work with this wrapper unchanged; a plain path
    (this command's earlier form) still names a file. Before, an inline value was taken for a file
    name, and the error quoted the whole value, tokens included. An empty value (``"$VALUES"`` of an
    unset variable) or a bare ``file://`` is refused as such: it was read as the current folder,
    "cannot read : Is a directory"."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.addon.configuration import ConfigurationValuesError

    if not value.removeprefix(FILE_PREFIX).strip():
        raise ConfigurationValuesError(
            [
                f"--configuration-values {value!r} names no values: pass them inline "
                "('{}' for none), as file://PATH or as a PATH"
            ]
        )
    if value.startswith(FILE_PREFIX):
        return _read_values_file(value.removeprefix(FILE_PREFIX))
    if _inline(value) and not _names_a_file(value):
        return value
    return _read_values_file(value)


def _read_values_file(path: str) -> str:
    """The text of a values file; a file that is not UTF-8 (a binary picked by mistake) is refused as
    configuration values (exit 2) naming it: it ended in a UnicodeDecodeError traceback. A file that
    cannot be read is named with the option that gave it (before session s40 the message was the
    bare ``[Errno 2] No such file or directory: 'missing.yaml'``)."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.addon.configuration import ConfigurationValuesError

    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigurationValuesError([f"{redact_value(path)}: not UTF-8 text"]) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigurationValuesError(
            [f"--configuration-values: cannot read {redact_value(path)}: {reason}"]
        ) from None


def _values_source(value: str) -> str:
    """How messages name the values: their file, or :data:`INLINE` (never the values themselves)."""
    if value.startswith(FILE_PREFIX):
        return value.removeprefix(FILE_PREFIX)
    return INLINE if _inline(value) and not _names_a_file(value) else value


def _refuse_invalid_input(args: argparse.Namespace, values: dict[str, Any] | None) -> None:
    """Raise :class:`~igw.addon.operations.AddonInputError` (exit 2) for input that is wrong whatever
    the cluster holds, before any AWS client exists: without a region the values' and the role's
    problems were hidden behind "You must specify a region", and with one they ended in exit 1, the
    code of a failed AWS operation."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.addon import operations, pins

    if args.addon_command == "create":
        version = args.version or pins.IGW_ADDON_VERSION
        problems = operations.create_input_problems(
            values=values or {}, version=version, role_arn=args.role_arn, identity=args.identity
        )
    elif args.addon_command == "update":
        problems = operations.update_input_problems(values=values, version=args.version)
    else:
        return
    if problems:
        source = args.configuration_values
        where = f" (configuration values from {_values_source(source)})" if source is not None else ""
        raise operations.AddonInputError(
            f"refusing to {args.addon_command} the add-on: invalid input{where}", problems
        )


def _refuse_ignored_options(args: argparse.Namespace) -> bool:
    """Refuse (print and return ``True``) an option the chosen form of the action would ignore:
    ``package --namespace NS`` without ``--push`` wrote the archive and pushed nowhere,
    ``versions --check-pins --addon-name X`` checked the CDK app's pins and not X, and ``--timeout``
    with ``--no-wait`` waited for nothing; each ran and exited 0 as if the option had been honoured."""
    command = f"igw addon {args.addon_command}"
    if args.addon_command == "package" and not args.push:
        return refuse_given(args, command=command, mode="a package without --push", ignored=_PUSH_ONLY)
    if args.addon_command == "versions" and args.check_pins:
        return refuse_given(args, command=command, mode="--check-pins", ignored=("addon_name",))
    if getattr(args, "no_wait", False):
        return refuse_given(args, command=command, mode="--no-wait", ignored=("timeout",))
    return False


_PUSH_ONLY: Final = ("namespace", "region", "profile")
"""``igw addon package`` options that only the push to ECR reads."""


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.addon import configuration, operations, pins
    from igw.addon.eks_api import AddonApiError

    if _refuse_ignored_options(args):
        return EXIT_USAGE
    try:
        if args.addon_command == "package":
            return _package(args)
        values = None
        source = getattr(args, "configuration_values", None)
        if source is not None:
            # the values' own problems first: they need no AWS account, region or credentials
            values = configuration.parse(_values_text(source), source=_values_source(source))
        _refuse_invalid_input(args, values)
        clients = _clients(args)
        assert isinstance(clients, operations.AwsClients)
        if args.addon_command == "versions":
            return _versions(args, clients.addons)
        waiter = None
        if not args.no_wait:
            waiter = operations.Waiter(
                timeout_s=args.timeout, progress=lambda line: print(line, file=sys.stderr)
            )
        if args.addon_command == "delete":
            operations.delete(
                clients=clients,
                cluster=args.cluster,
                preserve=args.preserve,
                wait=waiter,
                allow_config_deletion=args.allow_config_deletion,
            )
            done = "deleting from" if waiter is None else "deleted from"
            print(f"{operations.ADDON}: {done} {args.cluster}")
            return 0
        if args.addon_command == "create":
            addon = operations.create(
                clients=clients,
                cluster=args.cluster,
                role_arn=args.role_arn,
                values=values or {},
                version=args.version or pins.IGW_ADDON_VERSION,
                identity=args.identity,
                resolve_conflicts=args.resolve_conflicts,
                wait=waiter,
            )
        else:
            addon = operations.update(
                clients=clients,
                cluster=args.cluster,
                values=values,
                version=args.version,
                resolve_conflicts=args.resolve_conflicts,
                wait=waiter,
            )
        if (
            "addonVersion" not in addon and "id" in addon
        ):  # update --no-wait: the update request, not the add-on
            print(f"{operations.ADDON} update {addon['id']}: {addon.get('status', 'requested')}")
            return 0
        print(f"{operations.ADDON} {addon.get('addonVersion', '')}: {addon.get('status', 'requested')}")
        return 0
    except configuration.ConfigurationValuesError as exc:
        print(f"igw addon: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except operations.AddonInputError as exc:
        print(f"igw addon: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except operations.AddonOperationError as exc:
        print(f"igw addon: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except AddonApiError as exc:
        print(f"igw addon: {exc}" + (f"\n  - {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"igw addon: {redact_value(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # botocore's own errors: no region, no credentials, unknown profile, no route
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            NoRegionError,
            ProfileNotFound,
        )

        if isinstance(exc, ClientError):
            # AWS refused a read-only pre-check (DescribeCluster, GetRole): credentials rejected or
            # expired, access denied. It ended in a traceback; it is a failed AWS operation (exit 1).
            # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
            from igw.addon.eks_api import error_hint

            error = exc.response.get("Error", {})
            hint = error_hint(str(error.get("Code", "")), exc.operation_name, str(error.get("Message", "")))
            # AWS's message may quote what was sent (an EKS refusal quoting the API server's field
            # error, a value): redacted as every other error this command prints
            said = redact_value(str(exc))
            print(f"igw addon: AWS: {said}" + (f"\n  - {hint}" if hint else ""), file=sys.stderr)
            return EXIT_FAILED
        if not isinstance(exc, BotoCoreError):
            raise
        # each names what to do, as igw preflight's do: "Unable to locate credentials" alone left a
        # newcomer without the next step. boto3 reads AWS_DEFAULT_REGION (or the profile's region),
        # not AWS_REGION
        hint = ""
        if isinstance(exc, NoRegionError):
            hint = " (pass --region or set AWS_DEFAULT_REGION)"
        elif isinstance(exc, NoCredentialsError):
            hint = " (pass --profile, set AWS_PROFILE, or run aws configure or aws sso login)"
        elif isinstance(exc, ProfileNotFound):
            hint = " (name a profile of the AWS config: aws configure list-profiles)"
        # a parameter validation error quotes the value it refused
        print(f"igw addon: AWS: {redact_value(str(exc))}{hint}", file=sys.stderr)
        return EXIT_USAGE

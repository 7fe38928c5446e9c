from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from scheduler_app.models import Node, Pool
from scheduler_app.services.inventory import register_node, reissue_agent_credential

SYSTEM = "manage.py register_node"


class Command(BaseCommand):
    help = (
        "Register a GPU node in a pool and print its agent credential, shown this once. Its cards are "
        "added when its agent starts and reports them from NVML. For a node that exists, "
        "--new-credential issues a new credential (the old one stops working)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="The node's name, e.g. its host name.")
        parser.add_argument("--pool", help="The pool of a new node.")
        parser.add_argument("--cpu-milli", type=int, default=64_000, help="Host CPU in milli-cores.")
        parser.add_argument("--memory-mib", type=int, default=512 * 1024, help="Host memory in MiB.")
        parser.add_argument("--new-credential", action="store_true", help="The node exists: issue a new one.")

    def handle(self, *args, name, pool, cpu_milli, memory_mib, new_credential, **options):
        node = Node.objects.filter(name=name).first()
        if new_credential:
            if node is None:
                raise CommandError(f"No node named {name!r}.")
            credential = reissue_agent_credential(node, actor_name=SYSTEM)
        else:
            if node is not None:
                raise CommandError(f"Node {name!r} exists; give --new-credential for a new credential.")
            found = Pool.objects.filter(name=pool or "").first()
            if found is None:
                names = ", ".join(Pool.objects.values_list("name", flat=True)) or "none yet"
                raise CommandError(f"Give an existing pool with --pool (pools: {names}).")
            try:
                node, credential = register_node(
                    pool=found, name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, gpus=[]
                )
            except ValidationError as error:
                fields = error.message_dict.items()
                raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in fields)) from None
        self.stdout.write(credential)
        self.stderr.write(
            f"Node {node.name} in pool {node.pool.name}: the credential above is shown this once. Start the "
            "agent with it: python -m agent --portal URL --credential-file FILE"
        )

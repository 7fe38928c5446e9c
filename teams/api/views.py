"""Teams (members, secrets, Unix accounts), users' Unix accounts and personal API tokens over REST."""

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.idempotency import idempotent
from teams.api.permissions import IsOperator
from teams.api.serializers import (
    ApiTokenSerializer,
    CreatedApiTokenSerializer,
    IdlePolicySerializer,
    MemberSerializer,
    NewApiTokenSerializer,
    NewMemberSerializer,
    RoleSerializer,
    SetTeamSecretSerializer,
    TeamDetailSerializer,
    TeamSecretSerializer,
    TeamSerializer,
    UnixAccountSerializer,
    UserUnixAccountSerializer,
)
from teams.models import ApiToken, Membership
from teams.selectors import own_unix_account, team_members, team_secrets, teams_visible_to
from teams.services import (
    add_member,
    change_role,
    create_api_token,
    delete_team_secret,
    remove_member,
    revoke_api_token,
    set_idle_policy,
    set_team_secret,
    set_team_unix_account,
    set_user_unix_account,
)

SECRET_NAME = "The variable the team's jobs get: letters, digits and _, not starting with a digit."


class TeamViewSet(viewsets.GenericViewSet):
    """Your teams, your role in each, and each team's quota use."""

    serializer_class = TeamSerializer
    lookup_field = "team__slug"
    lookup_url_kwarg = "slug"
    lookup_value_converter = "slug"
    pagination_class = None

    def get_queryset(self):
        return Membership.objects.filter(user=self.request.user).select_related("team").order_by("team__name")

    def list(self, request):
        return Response(self.get_serializer(self.get_queryset(), many=True).data)

    def _team(self, slug):
        return get_object_or_404(teams_visible_to(self.request.user).distinct(), slug=slug)

    @extend_schema(responses=TeamDetailSerializer)
    def retrieve(self, request, slug=None):
        """The team and the Unix account its jobs run as."""
        return Response(TeamDetailSerializer(self._team(slug)).data)

    @extend_schema(request=UnixAccountSerializer, responses=TeamDetailSerializer)
    def partial_update(self, request, slug=None):
        """Operators map the team's jobs to an existing Unix account on the nodes (empty: the agent's
        own identity for the team)."""
        team = self._team(slug)
        form = UnixAccountSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        team = set_team_unix_account(team, actor=request.user, **form.validated_data)
        return Response(TeamDetailSerializer(team).data)

    @extend_schema(methods=["get"], responses=MemberSerializer(many=True))
    @extend_schema(methods=["post"], request=NewMemberSerializer, responses={201: MemberSerializer})
    @action(detail=True, methods=["get", "post"])
    @idempotent
    def members(self, request, slug=None):
        """Anyone in the team lists its members; team admins (and operators) add them."""
        team = self._team(slug)
        if request.method == "GET":
            return Response(MemberSerializer(team_members(team), many=True).data)
        form = NewMemberSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        membership = add_member(team, actor=request.user, **form.validated_data)
        return Response(MemberSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(methods=["patch"], request=RoleSerializer, responses=MemberSerializer)
    @extend_schema(methods=["delete"], request=None, responses={204: None})
    @action(detail=True, methods=["patch", "delete"], url_path="members/<int:membership_id>")
    def member(self, request, slug=None, membership_id=None):
        """Team admins change a member's role or remove them; a team keeps at least one admin."""
        membership = get_object_or_404(team_members(self._team(slug)), pk=membership_id)
        if request.method == "DELETE":
            remove_member(membership, actor=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        form = RoleSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return Response(
            MemberSerializer(change_role(membership, actor=request.user, **form.validated_data)).data
        )

    @extend_schema(methods=["get"], responses=IdlePolicySerializer)
    @extend_schema(methods=["put"], request=IdlePolicySerializer, responses=IdlePolicySerializer)
    @action(detail=True, methods=["get", "put"], url_path="idle-policy")
    def idle_policy(self, request, slug=None):
        """Anyone in the team reads when its work counts as idle; team admins (and operators) set it.
        Idle interactive work is warned, then stopped; idle batch work is noticed, and released if
        `release_idle_allocations`."""
        team = self._team(slug)
        if request.method == "PUT":
            form = IdlePolicySerializer(data=request.data)
            form.is_valid(raise_exception=True)
            data = form.validated_data
            team = set_idle_policy(
                team,
                actor=request.user,
                release=data["release_idle_allocations"],
                idle_minutes=data["idle_minutes"],
                util_percent=data["idle_util_percent"],
            )
        return Response(IdlePolicySerializer(team).data)

    @extend_schema(responses=TeamSecretSerializer(many=True))
    @action(detail=True)
    def secrets(self, request, slug=None):
        """Anyone in the team lists its secrets: names and who last set each when, never the values."""
        return Response(TeamSecretSerializer(team_secrets(self._team(slug)), many=True).data)

    @extend_schema(
        methods=["put"],
        request=SetTeamSecretSerializer,
        responses={200: TeamSecretSerializer, 201: TeamSecretSerializer},
    )
    @extend_schema(methods=["delete"], request=None, responses={204: None})
    @extend_schema(parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description=SECRET_NAME)])
    @action(detail=True, methods=["put", "delete"], url_path="secrets/<str:name>")
    def secret(self, request, slug=None, name=None):
        """Team admins set a secret (201 new, 200 replaced) or delete it; the value is never answered
        back. The team's jobs get it as the environment variable `name`."""
        team = self._team(slug)
        if request.method == "DELETE":
            delete_team_secret(get_object_or_404(team_secrets(team), name=name), actor=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        form = SetTeamSecretSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        secret, created = set_team_secret(team, name=name, actor=request.user, **form.validated_data)
        answer = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(TeamSecretSerializer(secret).data, status=answer)


class ApiTokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = ApiTokenSerializer
    lookup_value_converter = "int"

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(request=NewApiTokenSerializer, responses={201: CreatedApiTokenSerializer})
    def create(self, request):
        form = NewApiTokenSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        token, secret = create_api_token(
            request.user, name=form.validated_data["name"], expires_at=form.expiry(timezone.now())
        )
        token.token = secret
        return Response(CreatedApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = revoke_api_token(get_object_or_404(self.get_queryset(), pk=pk), user=request.user)
        return Response(self.get_serializer(token).data)


class UserUnixAccountView(APIView):
    """Operators: the existing Unix account a user's jobs run as on the nodes, in every team; empty:
    their team's."""

    permission_classes = [IsOperator]

    def _user(self, username):
        return get_object_or_404(get_user_model().objects.select_related("unix_mapping"), username=username)

    @extend_schema(responses=UserUnixAccountSerializer)
    def get(self, request, username):
        user = self._user(username)
        return self._answer(user, own_unix_account(user))

    @extend_schema(request=UnixAccountSerializer, responses=UserUnixAccountSerializer)
    def put(self, request, username):
        user = self._user(username)
        form = UnixAccountSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return self._answer(user, set_user_unix_account(user, actor=request.user, **form.validated_data))

    def _answer(self, user, unix_account: str) -> Response:
        body = {"username": user.get_username(), "unix_account": unix_account}
        return Response(UserUnixAccountSerializer(body).data)

"""The price catalog over REST: anyone signed in reads the prices in force, their history and quotes;
operators set a pool's price and upload price files. Members ask where a request would run and what it
would cost (estimate) and which share to take (recommend), accept resizes offered to their running work,
and read their teams' statements and budgets."""

import datetime as dt

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from billing_app.api.permissions import MaySetPrices
from billing_app.api.serializers import (
    BudgetViewSerializer,
    EstimateRequestSerializer,
    EstimateSerializer,
    PoolPriceSerializer,
    PriceHistoryQuerySerializer,
    PriceHistorySerializer,
    PriceUploadSerializer,
    QuoteQuerySerializer,
    QuoteSerializer,
    RecommendationSerializer,
    RecommendRequestSerializer,
    ResizeOfferSerializer,
    SetBudgetSerializer,
    SetPoolPriceSerializer,
    SetSharePremiumSerializer,
    SharePremiumSerializer,
    SpotFeedSerializer,
    StatementQuerySerializer,
    StatementSerializer,
    SwitchBillingSerializer,
)
from billing_app.budgets import set_budget
from billing_app.choices import ResizeState
from billing_app.feeds import set_spot_feed, upload_prices
from billing_app.ledger import budget_view, statement, statement_csv
from billing_app.models import ResizeOffer
from billing_app.quotes import quote
from billing_app.recommendation import recommend_for
from billing_app.resizing import accept_resize, visible_resize_offers
from billing_app.selectors import price_histories, prices_in_force, share_premiums_in_force
from billing_app.services import set_pool_price, set_share_premium
from billing_app.spot_feeds import PriceUploadError
from billing_app.switching import switch_billing_mode
from infra.api.idempotency import idempotent
from infra.echo import echoed
from scheduler_app.models import Pool
from scheduler_app.passes.estimates import estimate_request
from scheduler_app.selectors import requests_visible_to
from teams.api.permissions import IsOperator
from teams.models import Team
from teams.selectors import team_for_submit, teams_visible_to


class PriceListView(APIView):
    """The price in force now of every priced pool, per whole GPU-hour in USD (decimal strings).
    Unpriced pools are left out."""

    @extend_schema(responses=PoolPriceSerializer(many=True), tags=["prices"])
    def get(self, request):
        return Response(PoolPriceSerializer(prices_in_force(), many=True).data)


class PriceHistoryView(APIView):
    """Each priced pool's price over the last `hours`: the price at the start, then every change."""

    @extend_schema(
        parameters=[PriceHistoryQuerySerializer], responses=PriceHistorySerializer(many=True), tags=["prices"]
    )
    def get(self, request):
        form = PriceHistoryQuerySerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        now = timezone.now()
        since = now - dt.timedelta(hours=form.validated_data["hours"])
        return Response(PriceHistorySerializer(price_histories(since, now), many=True).data)


class QuoteView(APIView):
    """On-demand against spot for a request shape on one GPU model: per hour, over the max duration,
    and spot's effective cost once the pool's expected reclaims are counted."""

    @extend_schema(parameters=[QuoteQuerySerializer], responses=QuoteSerializer, tags=["prices"])
    def get(self, request):
        form = QuoteQuerySerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        return Response(QuoteSerializer(quote(**form.validated_data)).data)


class PriceUploadView(APIView):
    """Operators upload a spot price file; every row is checked and nothing is written if any is bad
    (400 with one error per bad line under `file`)."""

    permission_classes = [MaySetPrices]
    parser_classes = [MultiPartParser]

    @extend_schema(
        request={"multipart/form-data": PriceUploadSerializer}, responses=PoolPriceSerializer(many=True)
    )
    def post(self, request):
        form = PriceUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        name = form.validated_data.get("pool")
        pool = get_object_or_404(Pool, name=name) if name else None
        try:
            text = form.validated_data["file"].read().decode("utf-8")
        except UnicodeDecodeError:
            raise serializers.ValidationError({"file": ["The file is not UTF-8 text."]}) from None
        try:
            rows = upload_prices(text, actor=request.user, pool=pool)
        except PriceUploadError as error:
            raise serializers.ValidationError({"file": error.errors}) from None
        return Response(PoolPriceSerializer(rows, many=True).data, status=201)


class PoolPriceView(APIView):
    """Operators price a pool from now (or a later effective_from); earlier prices stay in the history."""

    permission_classes = [MaySetPrices]

    @extend_schema(
        request=SetPoolPriceSerializer,
        responses=PoolPriceSerializer,
        parameters=[OpenApiParameter("name", str, OpenApiParameter.PATH, description="The pool's name.")],
        tags=["prices"],
    )
    def put(self, request, name):
        form = SetPoolPriceSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        price = set_pool_price(pool, actor=request.user, **form.validated_data)
        return Response(PoolPriceSerializer(price).data)


class EstimateView(APIView):
    """Where the next scheduling pass would put the request, or when it would start; nothing is
    submitted. The name is optional here."""

    @extend_schema(request=EstimateRequestSerializer, responses=EstimateSerializer)
    def post(self, request):
        form = EstimateRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        if not fields.get("name", "").strip():
            fields.pop("name", None)
        estimate = estimate_request(
            user=request.user,
            team=team_for_submit(request.user, fields.pop("team", "")),
            pool_name=fields.pop("pool"),
            **fields,
        )
        return Response(EstimateSerializer(estimate).data)


class RecommendView(APIView):
    """The time/cost curve of a request shape on each GPU model it may run on, on-demand and spot, its
    Pareto front, and the cheapest option that meets the deadline and budget; nothing is submitted."""

    @extend_schema(request=RecommendRequestSerializer, responses=RecommendationSerializer, tags=["prices"])
    def post(self, request):
        form = RecommendRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        team = team_for_submit(request.user, fields.pop("team"))
        pool_name = fields.pop("pool")
        pool = Pool.objects.filter(name=pool_name).first() if pool_name else None
        if pool_name and pool is None:
            raise ValidationError({"pool": f"No pool {echoed(pool_name)!r}."})
        gpu_model, recommendation = recommend_for(team=team, pool=pool, **fields)
        data = {"gpu_model": gpu_model, **recommendation.__dict__}
        return Response(RecommendationSerializer(data).data)


class ResizeOfferViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Resizes offered to your teams' running work (`?request=<id>`, `?state=offered`); `accept/` opts in:
    the scheduler then applies it at the job's next checkpoint."""

    serializer_class = ResizeOfferSerializer
    queryset = ResizeOffer.objects.none()  # names the model for the schema; get_queryset scopes it
    lookup_value_converter = "int"

    def get_queryset(self):
        offers = visible_resize_offers(self.request.user)
        params = self.request.query_params
        if params.get("request", "").isdigit():
            offers = offers.filter(request_id=int(params["request"]))
        if state := params.get("state"):
            if state not in ResizeState.values:
                raise ValidationError({"state": f"One of: {', '.join(ResizeState.values)}."})
            offers = offers.filter(state=state)
        return offers

    @extend_schema(
        parameters=[
            OpenApiParameter("request", int, description="Only this request's offers."),
            OpenApiParameter("state", str, description="offered, accepted, applied or withdrawn."),
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses=ResizeOfferSerializer)
    @action(detail=True, methods=["post"])
    @idempotent
    def accept(self, request, pk=None):
        offer = accept_resize(get_object_or_404(self.get_queryset(), pk=pk), user=request.user)
        return Response(ResizeOfferSerializer(offer).data)


def _team(request, slug: str) -> Team:
    """A team the user may read (its members; operators: every team); another team's is a 404."""
    return get_object_or_404(teams_visible_to(request.user), slug=slug)


def _month_and_user(request, team: Team):
    query = StatementQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return query.validated_data["month"], _member(team, query.validated_data.get("user"))


def _member(team: Team, username: str | None):
    """The team's member of that username; None when no username is given."""
    if not username:
        return None
    membership = team.memberships.select_related("user").filter(user__username=username).first()
    if membership is None:
        raise ValidationError({"user": f"{echoed(username)!r} is not a member of team {team.slug}."})
    return membership.user


class StatementView(APIView):
    """A team's monthly statement (or one member's, with ?user=): the total and its breakdowns by user,
    pool and billing mode, USD as decimal strings. Members read their team's; operators every team's."""

    @extend_schema(parameters=[StatementQuerySerializer], responses=StatementSerializer, tags=["billing"])
    def get(self, request, slug):
        team = _team(request, slug)
        month, user = _month_and_user(request, team)
        return Response(StatementSerializer(statement(team, month, user=user)).data)


class StatementCsvView(APIView):
    """The statement's ledger entries as CSV, one entry a row, amounts at full precision."""

    @extend_schema(
        parameters=[StatementQuerySerializer], responses={(200, "text/csv"): str}, tags=["billing"]
    )
    def get(self, request, slug):
        team = _team(request, slug)
        month, user = _month_and_user(request, team)
        response = HttpResponse(statement_csv(team, month, user=user), content_type="text/csv")
        who = f"-{user.get_username()}" if user else ""
        response["Content-Disposition"] = f'attachment; filename="{team.slug}{who}-{month:%Y-%m}.csv"'
        return response


class OperatorStatementsView(APIView):
    """Operators: every team's statement for the month."""

    permission_classes = [IsOperator]

    @extend_schema(
        parameters=[StatementQuerySerializer], responses=StatementSerializer(many=True), tags=["billing"]
    )
    def get(self, request):
        query = StatementQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        month = query.validated_data["month"]
        return Response(
            StatementSerializer([statement(t, month) for t in Team.objects.order_by("slug")], many=True).data
        )


class BudgetView(APIView):
    """A team's month against its budget (GET: members); PUT sets the budget (team admins)."""

    @extend_schema(responses=BudgetViewSerializer, tags=["billing"])
    def get(self, request, slug):
        return Response(BudgetViewSerializer(budget_view(_team(request, slug))).data)

    @extend_schema(request=SetBudgetSerializer, responses=BudgetViewSerializer, tags=["billing"])
    def put(self, request, slug):
        team = _team(request, slug)
        form = SetBudgetSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        user = _member(team, fields.pop("user", ""))
        set_budget(team, actor=request.user, user=user, **fields)
        return Response(BudgetViewSerializer(budget_view(team)).data)


class SwitchBillingView(APIView):
    """Bill a running request as on-demand or spot from now on (spot needs a checkpoint interval)."""

    @extend_schema(request=SwitchBillingSerializer, responses=SwitchBillingSerializer, tags=["billing"])
    @idempotent
    def post(self, request, pk):
        gpu_request = get_object_or_404(requests_visible_to(request.user), pk=pk)
        form = SwitchBillingSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        switched = switch_billing_mode(
            gpu_request,
            user=request.user,
            mode=form.validated_data["billing_mode"],
            checkpoint_interval_s=form.validated_data["checkpoint_interval_s"],
        )
        return Response(SwitchBillingSerializer(switched).data)


class SharePremiumView(APIView):
    """The premium or discount in force per slice size (anyone signed in); operators add one (POST)."""

    def get_permissions(self):
        return [MaySetPrices()] if self.request.method == "POST" else super().get_permissions()

    @extend_schema(responses=SharePremiumSerializer(many=True), tags=["prices"])
    def get(self, request):
        return Response(SharePremiumSerializer(share_premiums_in_force(), many=True).data)

    @extend_schema(
        request=SetSharePremiumSerializer, responses={201: SharePremiumSerializer}, tags=["prices"]
    )
    @idempotent
    def post(self, request):
        form = SetSharePremiumSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        row = set_share_premium(actor=request.user, **form.validated_data)
        return Response(SharePremiumSerializer(row).data, status=201)


class SpotFeedView(APIView):
    """Operators choose what drives a spot pool's price: occupancy (with bounds), replay, or upload."""

    permission_classes = [MaySetPrices]

    @extend_schema(request=SpotFeedSerializer, responses=SpotFeedSerializer, tags=["prices"])
    def put(self, request, name):
        form = SpotFeedSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        pool = get_object_or_404(Pool, name=name)
        values = dict(form.validated_data)
        if "replay_series" in values:
            values["replay_series_key"] = values.pop("replay_series")
        return Response(SpotFeedSerializer(set_spot_feed(pool, actor=request.user, **values)).data)
